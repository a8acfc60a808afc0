"""``compare`` (one model, several targets) and ``sweep`` (models x targets x precisions x
memory placements), each also across compile flows (``flows``: ``mcu_npu.compile`` and
others', ``cells``): each builds the grid's cells, runs them through an executor
(``executors``) and gathers the rows into a ``Grid``, printing a line per finished cell when
asked."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from ..errors import ConfigError
from ..model_source import check_source, model_name, model_names
from ..targets import get_target, targets as all_targets
from .cells import OURS, Cell, Row, flow_label
from .config import check_axes
from .executors import run_cells
from .pareto import OBJECTIVES, pareto_front
from .table import BOUND_NOTE, format_table, numeric_heads, table_cells


@dataclass
class Grid:
    """A grid's rows, in the order of its cells, and what they were asked; ``front`` is
    their Pareto front (``pareto``), ``str()`` the table and the front as text, ``to_html()``
    one self-contained page with charts."""

    rows: list[Row]
    title: str = ""
    objectives: tuple = OBJECTIVES
    seconds: float = field(default=0.0, compare=False)
    """Wall time of the whole grid."""

    @property
    def front(self) -> list[Row]:
        return pareto_front(self.rows, self.objectives)

    def __str__(self) -> str:
        front = self.front
        ok = sum(r.ok for r in self.rows)
        bound = [BOUND_NOTE] if any(r.latency_is_bound for r in self.rows) else []
        lines = [self.title, format_table(self.rows, front), *bound, "",
                 f"{ok}/{len(self.rows)} compiled; * marks the Pareto front "
                 f"({_objectives_text(self.objectives)}, among the rows that fit):"]
        lines += [f"  {front_line(r)}" for r in front] or ["  (no row fits)"]
        lines += warnings_lines(self.rows)
        return "\n".join(line for line in lines if line is not None)

    def to_html(self) -> str:
        from ..report.html_grid import render_grid

        fixed, head, cells = table_cells(self.rows)
        return render_grid(self.rows, self.front, self.title, fixed, head, cells,
                           numeric_heads(self.rows), self.objectives)

    def to_json(self, indent: int | None = 2) -> str:
        front = {id(r) for r in self.front}
        return json.dumps({"title": self.title, "seconds": round(self.seconds, 2),
                           "objectives": [list(o) for o in self.objectives],
                           "rows": [{**r.to_dict(), "pareto": id(r) in front}
                                    for r in self.rows]}, indent=indent)


def grid_from_json(text: str | bytes) -> Grid:
    """A grid written by ``Grid.to_json``."""
    d = json.loads(text)
    return Grid([Row.from_dict(r) for r in d["rows"]], d.get("title", ""),
                tuple(tuple(o) for o in d.get("objectives", OBJECTIVES)),
                seconds=d.get("seconds", 0.0))


def front_line(r: Row) -> str:
    return (f"{r.model} on {r.target} ({r.precision}, memory {r.memory_placement}"
            f"{_via(r)}): "
            f"{'>=' if r.latency_is_bound else ''}{r.latency_us:,.1f} us, SQNR {r.sqnr_db:.2f} dB, RAM {r.ram_bytes / 1024:,.1f} "
            f"KiB, flash {(r.flash_bytes or 0) / 1024:,.1f} KiB")


def warnings_lines(rows: list[Row]) -> list[str]:
    """mcu-npu's warnings of the compiles, each once, with how many rows gave it."""
    seen: dict[str, int] = {}
    for r in rows:
        for w in r.warnings:
            seen[w] = seen.get(w, 0) + 1
    return ["", "warnings:"] + [f"  {w} ({n} rows)" for w, n in seen.items()] if seen else []


def _objectives_text(objectives) -> str:
    return ", ".join(f"{'lower' if s == 'min' else 'higher'} {k}" for k, s in objectives)


def compare(model, example_inputs=None, targets: Iterable[str] | None = None,
            calibration=None, *, executor=None, workers: int | None = None,
            ray_address: str | None = None, progress: bool | None = None,
            on_row: Callable[[Row], None] | None = None, timeout: float | None = None,
            flows=(None,), extras=None, **compile_kwargs) -> Grid:
    """Compile one model for each of ``targets`` (default: every preset) and set the results
    side by side: fits, latency, NPU share, flash, RAM, SQNR and top-1 agreement against the
    float model, the placement chosen; a target whose compile fails is a row with its error.

    ``model`` is a factory (``"file.py:factory"``, ``"module:factory"``, a module-level
    callable returning ``(model, example_inputs[, calibration])``), compiled in worker
    processes, or a ``torch.nn.Module`` / ``ExportedProgram`` with ``example_inputs``,
    compiled in this process one target after another (a module is not sent to other
    processes). ``compile_kwargs`` go to every ``mcu_npu.compile`` (``precision``,
    ``memory``, ``npu_compiler``, ``io``, ...). ``executor``, ``workers``, ``ray_address``,
    ``progress``, ``on_row``, ``timeout``, ``flows``, ``extras``: as for ``sweep``."""
    targets = check_targets(all_targets() if targets is None else targets)
    if isinstance(model, str) or callable(model) and not (_is_module(model) or
                                                         _is_exported(model)):
        if example_inputs is not None:
            raise ConfigError("example_inputs come from the model's factory: pass either a "
                              "factory or a module with its example inputs")
        check_source(model)
        source = model
    else:
        if example_inputs is None and not _is_exported(model):
            raise ConfigError("compare needs example_inputs with a module")
        if executor not in (None, "serial") or timeout is not None:
            raise ConfigError(f"a module stays in this process (executor 'serial'); for the "
                              f"{executor or 'process'!r} executor"
                              f"{' or a timeout' if timeout is not None else ''} pass its "
                              f"factory instead")
        source, executor = _Given(model, example_inputs), "serial"
    precision = compile_kwargs.pop("precision", None)
    memory = compile_kwargs.pop("memory", "auto")
    check_axes([precision], [memory])
    if calibration is not None:
        compile_kwargs["calibration"] = calibration
    flows = named_flows(flows, extras)
    cells = [Cell(source, t, precision, memory, compile_kwargs, flow=f, flow_name=fn,
                  extras=extras) for t in targets for fn, f in flows]
    title = f"compare: {model_name(source)} on {len(targets)} targets{_flows_text(flows)}"
    return run_grid(cells, title, executor=executor, workers=workers,
                    ray_address=ray_address, progress=progress, on_row=on_row,
                    timeout=timeout)


def sweep(models, targets: Iterable[str], precisions: Sequence = (None,),
          memory: Sequence[str] = ("auto",), *, executor=None, workers: int | None = None,
          ray_address: str | None = None, progress: bool | None = None,
          on_row: Callable[[Row], None] | None = None, timeout: float | None = None,
          flows=(None,), extras=None, **compile_kwargs) -> Grid:
    """Compile every model for every target at every precision and memory placement, each
    compile in a worker process, and gather the rows with their Pareto front (lower latency,
    higher SQNR, less RAM). A compile that fails is a row with its error.

    ``models``: factories (see ``compare``), a list or ``{name: factory}``; models cross
    process boundaries by their factory's name, never pickled. ``executor``: "process"
    (the default: a process pool (``forkserver``) of ``workers`` processes, one per core by
    default), "ray" (tasks on the Ray cluster at ``ray_address``, "local" or None starting
    one here; the default when ``ray_address`` is given), "serial" (this process) or a
    ``concurrent.futures.Executor``. ``progress``: a line on stderr per finished cell (None:
    when stderr is a terminal); ``on_row`` is called with each row as it comes.
    ``timeout``: seconds a cell may compile before its process is stopped and its row says
    so (each cell then runs in a process of its own; "process" executor only).
    ``flows``: the compile flows, a list or ``{name: flow}``, each cell compiled by each
    (None: ``mcu_npu.compile``; another flow's function named as a factory is, see
    ``cells``); ``extras``: a function of each row's ``.pte`` bytes, named the same way,
    giving ``{name: figure}`` for the row's ``extra`` (extra columns of the table).
    ``compile_kwargs`` go to every ``mcu_npu.compile`` (and to the other flows)."""
    if not isinstance(models, (Mapping, list, tuple)):
        models = [models]
    named = list(models.items()) if isinstance(models, Mapping) else \
        list(zip(model_names(models), models))
    for _, m in named:
        if not (isinstance(m, str) or callable(m)) or _is_module(m):
            raise ConfigError(f"sweep takes model factories ('file.py:factory', "
                              f"'module:factory' or a module-level function), not "
                              f"{type(m).__name__}: a module is not sent to worker processes")
        check_source(m)
    targets = check_targets(targets)
    precisions = list(precisions) or [None]
    memory = [memory] if isinstance(memory, str) else list(memory) or ["auto"]
    check_axes(precisions, memory)
    flows = named_flows(flows, extras)
    cells = [Cell(m, t, p, mem, compile_kwargs, name or "", f, fn, extras)
             for name, m in named for t in targets for p in precisions for mem in memory
             for fn, f in flows]
    title = (f"sweep: {len(named)} models x {len(targets)} targets x {len(precisions)} "
             f"precisions x {len(memory)} memory placements{_flows_text(flows)}")
    return run_grid(cells, title, executor=executor, workers=workers,
                    ray_address=ray_address, progress=progress, on_row=on_row,
                    timeout=timeout)


def named_flows(flows, extras=None) -> list[tuple[str, object]]:
    """``flows`` (a list, or ``{name: flow}``) as (name, flow) pairs, each flow and
    ``extras`` checked as a model source is (``check_source``), before any worker starts."""
    flows = [flows] if flows is None or isinstance(flows, str) or callable(flows) else flows
    pairs = list(flows.items()) if isinstance(flows, Mapping) else \
        [(flow_label(f), f) for f in flows]
    if not pairs:
        raise ConfigError("give at least one flow (None: mcu_npu.compile)")
    for _, f in pairs:
        if f is not None:
            check_source(f)
    if extras is not None:
        check_source(extras)
    return pairs


def _flows_text(flows: list) -> str:
    return f" x {len(flows)} flows" if len(flows) > 1 else ""


def run_grid(cells: list[Cell], title: str, *, executor=None, workers=None, ray_address=None,
             progress=None, on_row=None, timeout=None) -> Grid:
    """Run ``cells`` and gather their rows in cell order, a progress line per finished cell."""
    if not cells:
        raise ConfigError("the grid is empty: give at least one model and one target")
    if executor is None:
        executor = "ray" if ray_address is not None else "process"
    show = sys.stderr.isatty() if progress is None else progress
    rows: list[Row | None] = [None] * len(cells)
    start = time.monotonic()
    for done, (i, row) in enumerate(run_cells(cells, executor, workers=workers,
                                              ray_address=ray_address, timeout=timeout), 1):
        rows[i] = row
        if show:
            print(progress_line(done, len(cells), time.monotonic() - start, row),
                  file=sys.stderr, flush=True)
        if on_row is not None:
            on_row(row)
    return Grid(rows, title, seconds=time.monotonic() - start)


def progress_line(done: int, total: int, elapsed: float, row: Row) -> str:
    width = len(str(total))
    what = f"{row.model} on {row.target} ({row.precision}, memory {row.memory}{_via(row)})"
    if not row.ok:
        return f"[{done:{width}}/{total} {elapsed:7.1f} s] {what}: error: {row.error}"
    fits = {True: "fits", False: "DOES NOT FIT", None: "fit unknown"}[row.fits]
    latency = "-" if row.latency_us is None else f"{row.latency_us:,.1f} us"
    sqnr = "-" if row.sqnr_db is None else f"{row.sqnr_db:.2f} dB"
    return (f"[{done:{width}}/{total} {elapsed:7.1f} s] {what}: {latency}, {sqnr}, {fits} "
            f"({row.seconds:.1f} s)")


def _via(row: Row) -> str:
    """A row's flow for a line about it: nothing for ``mcu_npu.compile``'s."""
    return "" if row.flow == OURS else f", flow {row.flow}"


def check_targets(names: Iterable[str]) -> list[str]:
    """The presets' names, each checked (ConfigError naming the valid ones)."""
    names = [names] if isinstance(names, str) else list(names)
    if not names:
        raise ConfigError("give at least one target (`mcu-npu targets` lists them)")
    return [get_target(n).name for n in names]


def _is_module(obj) -> bool:
    return any(c.__name__ == "Module" and c.__module__.startswith("torch.nn")
               for c in type(obj).__mro__)


def _is_exported(obj) -> bool:
    return type(obj).__name__ == "ExportedProgram"


class _Given:
    """A module already built, as a factory of this process (never sent to another)."""

    def __init__(self, model, example_inputs):
        self.model, self.example_inputs = model, example_inputs
        self.__name__ = type(model).__name__

    def __call__(self):
        if self.example_inputs is None:  # an ExportedProgram's own
            return self.model, self.model.example_inputs[0]
        return self.model, self.example_inputs
