"""Grids of compiles: ``compare`` one model across targets, ``sweep`` models x targets x
precisions x memory placements. Each cell is one ``mcu_npu.compile`` run by an executor
(a process pool by default, its workers forked from a server that imported the compiler
once; Ray when asked: ``executors``), its outcome a row of plain values (``cells.Row``);
the rows come back as they finish, a failed compile as a row with its error. ``Grid`` holds them: a text table, the Pareto front (``pareto``), an HTML
page (``report.html_grid``)."""

from .cells import Cell, Row, run_cell
from .pareto import OBJECTIVES, pareto_front
from .run import Grid, compare, sweep

__all__ = ["compare", "sweep", "Grid", "Row", "Cell", "run_cell", "pareto_front",
           "OBJECTIVES"]
