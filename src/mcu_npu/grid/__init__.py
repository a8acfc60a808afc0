"""Grids of compiles: ``compare`` one model across targets, ``sweep`` models x targets x
precisions x memory placements; both also across compile flows (``flows=``: None for
``mcu_npu.compile``, other compilers' flows named as model factories are,
``"module:function"`` or ``"file.py:function"``, so that they run in the workers: ``cells``).
Each cell is one compile run by an executor (a process pool by default, its workers forked
from a server that imported the compiler once; Ray when asked: ``executors``), its outcome a
row of plain values (``cells.Row``: its ``flow`` named, ``extra`` the figures a flow or an
``extras`` function of the ``.pte`` added, extra columns of the table); the rows come back
as they finish, a failed compile as a row with its error. ``Grid`` holds them: a text table,
the Pareto front (``pareto``), an HTML page (``report.html_grid``)."""

from .cells import Cell, Row, run_cell
from .pareto import OBJECTIVES, pareto_front
from .run import Grid, compare, sweep

__all__ = ["compare", "sweep", "Grid", "Row", "Cell", "run_cell", "pareto_front",
           "OBJECTIVES"]
