"""One cell of a grid: a model (named by its factory), a target, a precision, a memory
placement and the flow that compiles it, run in whichever process runs the cell; and its
row, the figures a comparison reads, as plain values that cross a process boundary.

A flow is ``mcu_npu.compile`` (``flow=None``, the default) or another compiler's, named as a
model factory is (``"file.py:function"``, ``"module:function"``, a module-level callable),
so that two flows can be set side by side in one grid. Its function is called as
``flow(model, example_inputs, calibration, target, options)`` and returns the ``.pte``
bytes, or a dict of them (``"pte"``), any ``Row`` figures it knows (``ops_on_npu``,
``sqnr_db``, ...) and ``"extra"``: {name: figure} for the row's ``extra``. ``options`` are
the cell's compile arguments, ``precision`` and ``memory`` included when not the default: a
flow raises on what it cannot do. A cell's ``extras`` function (named the same way) adds
figures read from the ``.pte`` of any flow.

``run_cell`` never raises for a failed compile: the failure is the row's ``error``, so one
model a target cannot take costs one row, not the grid."""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass, field, fields, replace

from ..errors import McuNpuWarning, first_line
from ..model_source import factory, load_model_spec, model_name

OURS = "mcu-npu"
"""The flow name of ``mcu_npu.compile``'s rows."""

TOP1_SAMPLES = 8
"""Samples the top-1 agreement is counted on (the calibration samples the report's SQNR is
measured on: ``flow.measure.ACCURACY_SAMPLES``), unless ``accuracy_samples`` are given."""


@dataclass(frozen=True)
class Cell:
    """What to compile: ``source`` a model factory (``file.py:factory``,
    ``module:factory``, a module-level callable; see ``model_source``), ``options`` the
    other ``mcu_npu.compile`` arguments (calibration samples included; they override the
    factory's); ``flow`` the compile flow (None: ``mcu_npu.compile``; else named as a
    factory is, see the module's docstring), ``extras`` a function of the ``.pte`` bytes
    giving more figures for the row's ``extra``."""

    source: object
    target: str
    precision: object = None
    memory: str = "auto"
    options: dict = field(default_factory=dict)
    name: str = ""
    """The model's name in the row (default: the factory's name)."""
    flow: object = None
    flow_name: str = ""
    """The flow's name in the row (default: ``OURS``, or the flow function's name)."""
    extras: object = None


@dataclass(frozen=True, kw_only=True)
class Row:
    """A cell's outcome: what was asked (``model``, ``target``, ``precision``, ``memory``,
    ``flow``), the compile's figures from ``report.summary`` where it compiled (another
    flow's: those it gives), else ``error``; ``extra`` the named figures a flow or the
    cell's ``extras`` added.
    ``npu_share`` is the NPU's share of the estimated latency; ``top1_agreement`` the
    fraction of samples whose argmax the program shares with the float model (classifier
    outputs only). ``seconds`` (the compile's wall time) is left out of equality: everything
    else is the same on every run."""

    model: str
    target: str
    precision: str
    memory: str
    flow: str = OURS
    error: str = ""
    npu_compiler: str | None = None
    fits: bool | None = None
    latency_us: float | None = None
    latency_is_bound: bool = False
    """The NPU part of ``latency_us`` is a lower bound (MACs at the NPU's peak: the NPU
    compiler gives no cycle count), not an estimate."""
    npu_us: float | None = None
    cpu_us: float | None = None
    npu_share: float | None = None
    ops_on_npu: int | None = None
    ops_total: int | None = None
    partitions: int | None = None
    flash_bytes: int | None = None
    ram_bytes: int | None = None
    scratch_bytes: int | None = None
    """The NPU's scratch (its largest call's), part of ``ram_bytes``."""
    memory_placement: str | None = None
    tightest_region: str | None = None
    """The memory region with the least room left, and that room (negative: short by)."""
    tightest_margin_bytes: int | None = None
    int16_ops: int | None = None
    sqnr_db: float | None = None
    reference_sqnr_db: float | None = None
    top1_agreement: float | None = None
    top1_samples: int = 0
    host_only: bool = False
    pte_bytes: int | None = None
    state_bytes: int | None = None
    """Bytes of the state a stateful program keeps between calls (None: no state)."""
    realtime_margin_us: float | None = None
    """With ``frame_period_ms``: the frame period less a call's estimated time."""
    extra: dict = field(default_factory=dict, hash=False)
    warnings: tuple[str, ...] = ()
    seconds: float = field(default=0.0, compare=False)

    @property
    def ok(self) -> bool:
        return not self.error

    def to_dict(self) -> dict:
        return {**asdict(self), "warnings": list(self.warnings)}

    @classmethod
    def from_dict(cls, d: dict) -> "Row":
        names = {f.name for f in fields(cls)}
        return cls(**{k: (tuple(v) if k == "warnings" else v) for k, v in d.items()
                      if k in names})


def precision_label(precision) -> str:
    """``compile``'s ``precision`` as a table cell: ``int8`` (None), ``int16``, ``auto``,
    ``int8+gru:int16`` for overrides."""
    if precision is None:
        return "int8"
    if isinstance(precision, str):
        return precision
    if isinstance(precision, dict):
        extra = ",".join(f"{k}:{v}" for k, v in (precision.get("overrides") or {}).items())
        return precision.get("default", "int8") + (f"+{extra}" if extra else "")
    return "auto" if type(precision).__name__ == "AutoPrecision" else str(precision)


def flow_label(flow) -> str:
    """A flow's name in a row: ``OURS`` for ``mcu_npu.compile`` (None), else its function's
    name."""
    return OURS if flow is None else model_name(flow)


def _asked(cell: Cell) -> dict:
    """What ``cell`` asked for, as the row's fields."""
    return dict(model=cell.name or model_name(cell.source), target=cell.target,
                precision=precision_label(cell.precision), memory=cell.memory,
                flow=cell.flow_name or flow_label(cell.flow))


def run_cell(cell: Cell) -> Row:
    """Compile ``cell`` in this process and measure it; a failure is the row's ``error``
    (the exception's type and first line; a ``sys.exit`` too). mcu-npu's warnings go into
    ``warnings``."""
    asked = _asked(cell)
    start = time.monotonic()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            row, pte = (_compile_row if cell.flow is None else _flow_row)(cell, asked)
            if cell.extras is not None:
                row = replace(row, extra={**row.extra, **dict(factory(cell.extras)(pte))})
    except (Exception, SystemExit) as exc:  # noqa: BLE001  (a failed compile is a row,
        # whatever raised it; a tool's command line inside a compile may call sys.exit)
        return Row(**asked, error=f"{type(exc).__name__}: {first_line(exc)}",
                   seconds=time.monotonic() - start)
    notes = tuple(dict.fromkeys(str(w.message).splitlines()[0] for w in caught
                                if issubclass(w.category, McuNpuWarning)))
    return replace(row, warnings=notes, seconds=time.monotonic() - start)


def error_row(cell: Cell, message: str) -> Row:
    """The row of a cell whose process failed before it could answer (a crash)."""
    return Row(**_asked(cell), error=message)


FLOW_FIGURES = frozenset(f.name for f in fields(Row)) - {
    "model", "target", "precision", "memory", "flow", "error", "pte_bytes", "extra",
    "warnings", "seconds"}
"""The ``Row`` figures another flow may give."""


def _flow_row(cell: Cell, asked: dict) -> tuple[Row, bytes]:
    """(row, .pte bytes) of ``cell`` compiled by its flow's function (module docstring)."""
    model, inputs, calibration = load_model_spec(cell.source)
    options = dict(cell.options)
    calibration = options.pop("calibration", calibration)
    if cell.precision is not None:
        options["precision"] = cell.precision
    if cell.memory != "auto":
        options["memory"] = cell.memory
    out = factory(cell.flow)(model, inputs, calibration, cell.target, options)
    out = dict(out) if isinstance(out, dict) else {"pte": out}
    pte, extra = out.pop("pte", None), out.pop("extra", {})
    if not isinstance(pte, (bytes, bytearray, memoryview)):
        raise TypeError(f"flow {asked['flow']} returned no .pte bytes (the bytes, or a dict "
                        f"with 'pte')")
    unknown = sorted(set(out) - FLOW_FIGURES)
    if unknown:
        raise TypeError(f"flow {asked['flow']} returned figures a row has not: "
                        f"{', '.join(unknown)} (put them in 'extra')")
    pte = bytes(pte)
    return Row(**asked, **out, pte_bytes=len(pte), extra=dict(extra)), pte


def _compile_row(cell: Cell, asked: dict) -> tuple[Row, bytes]:
    model, inputs, calibration = load_model_spec(cell.source)
    # after the factory: a failing one is quick
    from ..api import compile_with
    from ..flow.options import compile_options

    given = dict(cell.options)
    calibration = given.pop("calibration", calibration)
    accuracy = given.pop("accuracy_samples", None)
    etrecord = given.pop("etrecord", None)
    options = compile_options(target=cell.target, precision=cell.precision,
                              memory=cell.memory, **given)
    prog = compile_with(model, inputs, calibration, options, accuracy_samples=accuracy,
                        progress=False, etrecord=etrecord)
    s = prog.report.summary
    samples = accuracy or calibration or [inputs]
    float_model = prog.float_model if prog.float_model is not None else model  # a .pt2's too
    agreement, counted = top1_agreement(prog, float_model, inputs, samples[:TOP1_SAMPLES])
    latency, npu = s.get("latency_us"), s.get("npu_us")
    return Row(**asked, npu_compiler=s.get("npu_compiler"), fits=s.get("memory_fits"),
               latency_us=latency, npu_us=npu, cpu_us=s.get("cpu_us"),
               latency_is_bound=bool(prog.report.latency.get("npu_is_bound")),
               npu_share=round(npu / latency, 4) if latency and npu is not None else None,
               ops_on_npu=s["ops_on_npu"], ops_total=s["ops_total"],
               partitions=s["partitions"], flash_bytes=s.get("flash_bytes"),
               ram_bytes=s.get("ram_bytes"),
               scratch_bytes=prog.report.memory.get("ram", {}).get("npu_scratch"),
               memory_placement=s.get("memory_placement"),
               tightest_region=s.get("tightest_region"),
               tightest_margin_bytes=s.get("tightest_margin_bytes"),
               int16_ops=s.get("int16_ops"), sqnr_db=s.get("sqnr_db"),
               reference_sqnr_db=s.get("reference_sqnr_db"), top1_agreement=agreement,
               top1_samples=counted, host_only=bool(s.get("host_only")),
               pte_bytes=len(prog.buffer), state_bytes=s.get("state_bytes"),
               realtime_margin_us=s.get("realtime_margin_us")), bytes(prog.buffer)


def top1_agreement(prog, model, example_inputs: tuple, samples) -> tuple[float | None, int]:
    """(fraction of samples whose argmax over the last axis is the float model's, number of
    samples): for one classifier output, shaped (N, classes) with more than one class and
    unlike every input's shape (an autoencoder's reconstruction is no classification);
    (None, 0) for any other output."""
    import torch

    samples = [(s,) if isinstance(s, torch.Tensor) else tuple(s) for s in samples]
    with torch.no_grad():
        expected = model(*samples[0])
    if not _is_classifier(expected, example_inputs):
        return None, 0
    same = total = 0
    with torch.no_grad():
        for s in samples:
            want = model(*s).argmax(-1)
            got = prog.dequantize_outputs(prog.run(*prog.quantize_inputs(*s)))[0].argmax(-1)
            same += int((want == got).sum())
            total += want.numel()
    return round(same / total, 4), total


def _is_classifier(out, inputs: tuple) -> bool:
    import torch

    return isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[-1] > 1 and \
        all(tuple(out.shape) != tuple(x.shape) for x in inputs)
