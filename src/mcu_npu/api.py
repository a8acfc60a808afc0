"""The public entry points: ``compile`` a module for a target, ``load`` a ``.pte``."""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

import torch

from .errors import ConfigError, InvalidProgramError, stage, stage_error
from .files import write_atomic
from .graph_ids import node_id
from .npu import COMPILER_NAMES
from .backend import keep_interfaces_only, use_device_ids
from .cortex_m import cortex_m_core, is_cortex_m, lower_to_cortex_m
from .partition import NpuPartitioner
from .partition.plan import Plan, PlanOptions, plan_program
from .pipeline import default_aten_passes, export_module, to_edge_program
from .quantization import NeutronQuantizer, quantize, quantize_qat
from .program_io import dequantize_outputs, quantize_inputs, quantize_io
from .quantization.composed import TargetQuantizer, trial
from .quantization.precision import AutoPrecision, PrecisionChoice, PrecisionRequest, \
    parse_precision, resolve
from .report import REPORT_KEY, REPORT_SLACK, OpPlacement, PartitionInfo, Report, check_io, \
    restore_report, stored_report
from .targets import get_target


@dataclass
class CompiledProgram:
    """A compiled ``.pte`` with its report; ``run`` executes the serialized bytes on the host."""

    buffer: bytes
    report: Report
    reference: torch.fx.GraphModule | None = field(default=None, repr=False)
    _program: object = field(default=None, repr=False)
    float_model: torch.nn.Module | None = field(default=None, repr=False)
    """The model as given (float), for per-layer error against it."""
    _report_span: tuple[int, int] | None = field(default=None, repr=False)
    """(offset, length) of the report stored in ``buffer`` (``rewrite_report``)."""

    def rewrite_report(self) -> None:
        """Store ``report`` again in the ``.pte``, in place and at the same length (what the
        search of ``precision="auto"`` learns once the program exists); nothing the device
        runtime reads moves."""
        if self._report_span is None:
            raise ConfigError("this program keeps no place for its report")
        at, length = self._report_span
        stored = self.buffer[at:at + length]
        self.buffer = restore_report(self.buffer, stored, self.report)
        self._program = None

    def accuracy(self, samples) -> list[dict]:
        """Per-layer error on ``samples`` (tuples of model inputs, or tensors of a
        one-input model): one row per compute op, sorted so the op where accuracy is lost
        comes first (``mcu_npu.report.layers``)."""
        from .report.layers import layer_errors

        return layer_errors(self, samples)

    def save_c_header(self, path: str | os.PathLike, *, name: str = "model_pte",
                      section: str | None = ".rodata.model_pte") -> Path:
        """Write the ``.pte`` as a C header for firmware (``mcu_npu.c_header``): a 16-byte
        aligned ``const uint8_t name[]`` in linker section ``section`` (None: no section
        attribute), with ``#define``s for the memory pools and the program's I/O."""
        from .c_header import write_c_header

        return write_c_header(path, self.buffer, self.report, name=name, section=section)

    def save(self, path: str | os.PathLike) -> Path:
        return write_atomic(path, self.buffer)

    def run(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        """Execute the ``.pte``; with ``io="int8"`` it takes and returns int8 tensors (see
        ``quantize_inputs`` / ``dequantize_outputs``)."""
        if self._program is None:
            self._program = load(self.buffer)
        return self._program.run(*inputs)

    def save_selected_ops(self, path: str | os.PathLike,
                          pte_path: str | os.PathLike | None = None) -> Path:
        """Write ExecuTorch's selective-build operator list for this program (made by
        ExecuTorch's ``gen_oplist`` from the ``.pte``; ``pte_path``: where it was saved)."""
        from .kernels_list import write_selected_ops

        return write_selected_ops(self.buffer, path, pte_path)

    def quantize_inputs(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Float inputs as the program takes them: quantized with the reported input
        parameters when it was compiled with ``io="int8"``, unchanged otherwise."""
        return quantize_inputs(self.report.io, inputs)

    def dequantize_outputs(self, outputs) -> list[torch.Tensor]:
        """The program's outputs as float: dequantized with the reported output parameters
        when it was compiled with ``io="int8"``, unchanged otherwise."""
        return dequantize_outputs(self.report.io, outputs)


def _as_inputs(x) -> tuple:
    if isinstance(x, torch.Tensor):
        return (x,)
    if isinstance(x, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in x):
        return tuple(x)
    raise ConfigError("example inputs must be a tensor or a tuple of tensors")


def check_calibration(samples, example_inputs: tuple) -> list[tuple]:
    """Calibration samples as tuples matching the example inputs; ConfigError otherwise."""
    checked = []
    for i, sample in enumerate(samples):
        sample = (sample,) if isinstance(sample, torch.Tensor) else tuple(sample)
        if len(sample) != len(example_inputs):
            raise ConfigError(f"calibration sample {i} has {len(sample)} arrays but the model "
                              f"takes {len(example_inputs)} inputs")
        for j, (s, e) in enumerate(zip(sample, example_inputs)):
            s = _as_tensor(s, f"calibration sample {i}, input {j}")
            if tuple(s.shape) != tuple(e.shape):
                raise ConfigError(f"calibration sample {i}, input {j} has shape "
                                  f"{tuple(s.shape)} but the model's example input has "
                                  f"{tuple(e.shape)}")
            if s.dtype != e.dtype:
                raise ConfigError(f"calibration sample {i}, input {j} has dtype {s.dtype} but "
                                  f"the model's example input has {e.dtype}")
        checked.append(tuple(_as_tensor(s, f"calibration sample {i}") for s in sample))
    if not checked:
        raise ConfigError("calibration data is empty")
    return checked


def _as_tensor(value, what: str) -> torch.Tensor:
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ConfigError(f"{what} is not a tensor or an array: {type(value).__name__}") from exc


def _exclude_hint(op: str) -> str:
    if not op:
        return ("keep the op off the NPU with operators_not_to_delegate=[...] (CLI: --exclude "
                "OP; the report names each op), change the model around it, or report it")
    return (f"keep {op} off the NPU with operators_not_to_delegate=[{op!r}] (CLI: --exclude "
            f"{op}), change the model around it, or report it")


def _cpu_hint(op: str) -> str:
    op = op or "the op"
    return (f"{op} stays on the CPU, and ExecuTorch's Cortex-M lowering cannot take it in this "
            f"form: change how the model uses {op} (e.g. its input's rank or layout), or "
            "report it")


def _progress(samples: list, show: bool | None) -> Iterable[tuple]:
    show = len(samples) >= 16 and sys.stderr.isatty() if show is None else show
    for i, s in enumerate(samples, 1):
        if show:
            sys.stderr.write(f"\rcalibrating {i}/{len(samples)}")
            sys.stderr.flush()
        yield s
    if show:
        sys.stderr.write("\n")


def compile(
    model: torch.nn.Module,
    example_inputs,
    target: str = "imxrt700",
    calibration=None,
    npu_compiler: str = "auto",
    *,
    operators_not_to_delegate: Iterable[str] = (),
    progress: bool | None = None,
    train_fn: Callable[[torch.fx.GraphModule], None] | None = None,
    io: str = "float",
    deployable: bool = False,
    strict: bool = False,
    accuracy_samples=None,
    precision=None,
) -> CompiledProgram:
    """Compile ``model`` for ``target``: quantize (calibrating on ``calibration``), delegate
    what the NPU takes, serialize to ``.pte``. Without calibration data the example inputs
    calibrate, with a warning. With ``train_fn`` the quantization is aware-training: the
    fake-quantized graph, its ranges started from calibration, is handed to ``train_fn``.

    ``io="int8"`` makes the program's inputs and outputs the int8 tensors the NPU (or the
    Cortex-M int8 kernels) consume and produce: no quantize of an input, no dequantize of an
    output on the CPU; the report's ``io`` gives each one's scale and zero point, and
    ``run`` takes and returns int8 tensors (``quantize_inputs`` / ``dequantize_outputs``
    convert). ``io="float"`` (the default) keeps float inputs and outputs.

    A program that would not run on the board (payloads for the host only, from the
    reference NPU compiler; an operator no kernel library of the target provides) warns;
    with ``deployable=True`` it raises ``NotDeployableError`` instead. A program that does
    not fit the target's memory warns; with ``strict=True`` it raises ``MemoryFitError``.

    ``accuracy_samples`` (input tuples, like ``calibration``) adds the per-layer error to
    the report (``report.layers``, see ``CompiledProgram.accuracy``).

    ``precision`` picks int16 activations (with int8 weights: the NPU's 16x8 kernels) where
    the target runs them: ``"int16"`` everywhere, ``{"default": "int8", "overrides":
    {name: "int16"}}`` for the modules (``"gru"``) or nodes named, or ``"auto"`` /
    ``AutoPrecision(...)`` to raise the layers that buy the most accuracy per cycle until
    a target SQNR is met within a cycle budget. The report says which ops run int16 and
    why any asked for stays int8 (``report.precision``)."""
    request = parse_precision(precision)
    if isinstance(request, AutoPrecision):
        from .auto_precision import search

        return search(request, model, example_inputs, target=target, calibration=calibration,
                      npu_compiler=npu_compiler,
                      operators_not_to_delegate=operators_not_to_delegate,
                      progress=progress, train_fn=train_fn, io=io, deployable=deployable,
                      strict=strict, accuracy_samples=accuracy_samples, compile_fn=_compile)
    with stage("compiling the model"):  # any failure the stages below do not name
        return _compile(model, example_inputs, target, calibration, npu_compiler,
                        operators_not_to_delegate, progress, train_fn, io, deployable, strict,
                        accuracy_samples, request)


def _compile(model, example_inputs, target, calibration, npu_compiler,
             operators_not_to_delegate, progress, train_fn, io,
             deployable=False, strict=False, accuracy_samples=None,
             precision: PrecisionRequest = PrecisionRequest(),
             report_slack: int = 0) -> CompiledProgram:
    """``compile`` with a parsed precision request; ``report_slack`` bytes more room in the
    stored report for what a caller adds later (``CompiledProgram.rewrite_report``)."""
    tgt = get_target(target)
    check_io(io)
    if npu_compiler not in COMPILER_NAMES:
        raise ConfigError(f"unknown npu_compiler {npu_compiler!r}; choose one of: "
                          f"{', '.join(COMPILER_NAMES)}")
    example_inputs = _as_inputs(example_inputs)
    if calibration is None:
        warnings.warn("no calibration data: calibrating on the example inputs alone, so "
                      "quantization ranges will be narrow and results inaccurate; pass "
                      "calibration samples", UserWarning, stacklevel=3)
        samples = [example_inputs]
    else:
        samples = check_calibration(calibration, example_inputs)
    float_model = model.eval() if isinstance(model, torch.nn.Module) else model
    excluded = tuple(operators_not_to_delegate)
    with stage("exporting the model", _EXPORT_HINT):
        graph = export_module(float_model, example_inputs)
    with stage("rewriting the model for quantization"):
        graph = TargetQuantizer(tgt, aten_passes=default_aten_passes(tgt)) \
            .transform_for_annotation(graph)
    options = PlanOptions(excluded, npu_compiler)
    choice = None
    if train_fn is None:
        reference, edge, decided, choice = _quantize_ptq(
            graph, example_inputs, _progress(samples, progress), tgt, options, precision)
    else:
        planned = None
        if not precision.all_int8:
            with stage("deciding what the NPU runs", _exclude_hint):
                planned = trial(graph, tgt, options)[0]
            choice = resolve_precision(precision, graph, planned)
        if not cortex_m_core(tgt):
            quantizer = NeutronQuantizer(is_qat=True, precision=choice)
        elif planned is not None:  # the plan carries the exclusions and the compiler
            quantizer = TargetQuantizer(tgt, is_qat=True, plan=planned, precision=choice)
        else:
            quantizer = TargetQuantizer(tgt, is_qat=True, operators_not_to_delegate=excluded,
                                        npu_compiler=npu_compiler)
        with stage("quantization-aware training", _QAT_HINT):
            reference = quantize_qat(graph, example_inputs, _progress(samples, progress),
                                     train_fn, quantizer)
        with stage(_TO_EDGE):
            edge = to_edge_program(reference, example_inputs)
        decided = options
    decided = plan_edge(edge, tgt, decided)
    edge, decided = lower(edge, decided, tgt)
    io_params = {}
    if io == "int8":
        edge, io_params = quantize_io(edge)
    with stage("writing the compile report"):
        report = build_report(decided, edge)
        report.io = io_params
        if not precision.all_int8:
            report.precision = {"request": precision.to_json(),
                                "kept_int8": dict(choice.kept_int8) if choice else {}}
            if any(o.precision == "int16" and o.op in ("aten.sigmoid", "aten.tanh")
                   and o.kernel == "npu" for o in report.ops) and \
                    tgt.npu.kind.value == "ethos-u":
                report.notes.append(ACTIVATION_UNIT_NOTE)
        report.accuracy = {}
        from .report.latency import estimate_latency

        report.latency = estimate_latency(edge.exported_program(), tgt, report)
        slack = REPORT_SLACK + report_slack
        if accuracy_samples is not None:
            from .report.layers import stored_size

            accuracy_samples = check_calibration(accuracy_samples, example_inputs)
            slack += stored_size(report.ops)
        stored = stored_report(report, slack)
        edge._named_data_store.add_named_data(REPORT_KEY, stored)
    buffer = to_executorch(edge)
    with stage("checking the program's delegate tensors"):
        from .runtime.pte import Program

        program = Program(buffer)  # read once, by the three checks below
        _check_layouts(program)
    with stage("checking the program against the target's kernels"):
        from . import deployability
        from .kernels_list import fill_report

        fill_report(report, program, tgt, edge, {n.ident: n.node for n in decided.nodes})
        deployability.check(report, tgt, deployable, stacklevel=3)
    with stage("checking the program against the target's memory"):
        from .report.memory import check_fit, memory_report

        report.memory = memory_report(program, tgt, report)
        check_fit(report, strict, stacklevel=3)
    prog = CompiledProgram(buffer, report, reference, float_model=float_model)
    with stage("checking the program's accuracy on the host"):
        report.accuracy = measure_accuracy(float_model, reference, prog,
                                           samples[:ACCURACY_SAMPLES])
    if accuracy_samples is not None:
        with stage("measuring the per-layer error"):
            report.layers = prog.accuracy(accuracy_samples)
    prog.buffer = restore_report(buffer, stored, report)
    prog._report_span = (buffer.find(stored), len(stored))
    return prog


ACTIVATION_UNIT_NOTE = (
    "int16 sigmoid and tanh run on the Ethos-U's activation unit (Vela rescales their input "
    "to Q3.12); the host runs LiteRT's int16 kernels (interpolated tables), which can differ "
    "from it by a few 1/32768 steps")

_EXPORT_HINT = ("make the model capturable by torch.export (no data-dependent control flow, "
                "see torch.export's message), or report it")
_QAT_HINT = ("the exception came from train_fn or the fake-quantized graph it ran (see the "
             "chained exception); fix it there, or report it")
_QUANTIZE_HINT = "change how the model uses {op}, or report it"
_TO_EDGE = "converting the quantized model to the Edge dialect"


def _quantize_ptq(graph, example_inputs, samples, target, options: PlanOptions,
                  precision: PrecisionRequest = PrecisionRequest()):
    """PTQ with the NPU's rules, which is the plan's trial; where the plan leaves ops to a
    Cortex-M CPU, or ``precision`` asks for int16 activations, quantize again with the
    composed quantizer so those ops get the Cortex-M rules and the int16 ones the 16x8
    specs. Returns (reference, Edge program, the plan, the ``PrecisionChoice`` or None)."""
    samples = list(samples)
    fallback = cortex_m_core(target) is not None
    mixed = not precision.all_int8
    stages = {"quantize": lambda: stage("quantizing and calibrating", _QUANTIZE_HINT),
              "edge": lambda: stage(_TO_EDGE),
              "check": lambda: stage("deciding what the NPU runs" if fallback
                                     else "delegating to the NPU", _exclude_hint)}
    # with int16 asked for, the trial only places (its checks read no quantization values)
    # and the program is quantized again anyway: one calibration sample does
    decided, reference, edge = trial(graph, target,
                                     replace(options, calibration=samples[:1] if mixed
                                             else samples),
                                     graph_in_place=not fallback and not mixed,
                                     example_inputs=example_inputs, stages=stages)
    choice = resolve_precision(precision, graph, decided) if mixed else None
    if not mixed and (not fallback or not decided.placement.cpu):
        return reference, edge, decided, choice
    with stage("quantizing for the NPU and the Cortex-M kernels", _exclude_hint):
        quantizer = TargetQuantizer(target, plan=decided, precision=choice) if fallback \
            else NeutronQuantizer(precision=choice)
        reference = quantize(graph, example_inputs, samples, quantizer)
    with stage(_TO_EDGE):
        return reference, to_edge_program(reference, example_inputs), decided, choice


def resolve_precision(request: PrecisionRequest, graph, decided: Plan) -> PrecisionChoice:
    """``request`` on ATen ``graph``, where ``decided`` places its nodes: a node the plan
    leaves to the CPU stays int8 (the Cortex-M kernels are), with the reason."""
    cpu = {n.ident for n in decided.nodes if n.partition is None} | set(decided.placement.cpu)
    with stage("choosing the activation precision"):
        return resolve(request, graph, decided.target, cpu.__contains__,
                       {n.node: n.ident for n in decided.nodes if n.ident})


def plan_edge(edge, target, decided: Plan | PlanOptions) -> Plan:
    """The plan of the Edge program about to be lowered: ``decided`` when it describes that
    program, else the program planned now (with the placement the composed quantizer
    stamped on it). Planned here, on the real weights, because ExecuTorch hands
    partitioners a copy with fake ones."""
    with stage("delegating to the NPU", _exclude_hint):
        program = edge.exported_program()
        if isinstance(decided, Plan):
            if decided.describes(program):
                return decided
            return replace(plan_program(program, target, decided.options),
                           portable=decided.portable)
        return plan_program(program, target, decided)


def lower(edge, plan: Plan, target=None):
    """(Edge program manager, the plan it was lowered with): the NPU partitions of ``plan``
    (``plan_edge``) delegated and, on a target with a Cortex-M CPU, the rest on its int8
    kernels.

    The NPU side never fails the compile: a partition its NPU compiler fails on is planned
    again with its nodes on the CPU, and where ExecuTorch's Cortex-M lowering fails the CPU
    ops run as portable kernels; the report gives each such node the error as its reason."""
    import copy

    from .errors import PartitionError
    from .partition.support import Rejection, VerdictCategory

    with stage("delegating to the NPU", _exclude_hint):
        from .passes.edge import RefreshStrides

        for method in edge.methods:
            RefreshStrides()(edge.exported_program(method))
    while True:
        with stage("delegating to the NPU", _exclude_hint):
            try:
                delegated = edge.to_backend(NpuPartitioner(plan=plan))
                break
            except PartitionError as exc:
                if not exc.nodes:
                    raise
                why = Rejection(f"the NPU compiler failed on its partition: {exc}",
                                VerdictCategory.NPU_COMPILER)
                rejected = {**plan.compiler_rejections, **{n: why for n in exc.nodes}}
                plan = replace(plan_program(edge.exported_program(), plan.target,
                                            plan.options, rejected=rejected),
                               portable=plan.portable)
    edge = delegated
    with stage("delegating to the NPU", _exclude_hint):
        for method in edge.methods:
            keep_interfaces_only(edge.exported_program(method))
    core = cortex_m_core(target) if target is not None else None
    if core is not None:
        with stage("lowering to the Cortex-M kernels", _cpu_hint):
            before = copy.deepcopy(edge)
            try:
                edge = lower_to_cortex_m(edge, core)
            except Exception as exc:  # noqa: BLE001  (ExecuTorch's passes raise any type)
                why = stage_error("lowering to the Cortex-M kernels", exc)
                edge, plan = before, _all_portable(plan, str(why).splitlines()[0])
    with stage("delegating to the NPU"):
        for method in edge.methods:
            use_device_ids(edge.exported_program(method))
    return edge, plan


def _all_portable(plan: Plan, why: str) -> Plan:
    """``plan`` with every CPU node on portable kernels, for ``why``."""
    portable = dict(plan.portable)
    for n in plan.nodes:
        if n.partition is None and n.ident is not None:
            planned = portable.get(n.ident)
            portable[n.ident] = f"{planned}; {why}" if planned else f"portable kernels: {why}"
    return replace(plan, portable=portable)


def _check_layouts(program) -> None:
    """Every delegate tensor of ``program`` (a ``runtime.pte.Program``) in the memory order
    its partition was converted for: a program that hands the NPU a tensor transposed is
    never returned."""
    from .check import layout_problems

    problems = layout_problems(program)
    if problems:  # an inconsistency of the compiler's own: the stage wraps it, "report it"
        raise RuntimeError(f"{problems[0]}; the NPU would read it transposed "
                           f"({len(problems)} such tensor(s))")


def to_executorch(edge) -> bytes:
    """Serialize an Edge program; CPU-side quantize/dequantize need the quantized kernels'
    out variants registered first."""
    with stage("serializing the ExecuTorch program"):
        import executorch.kernels.quantized  # noqa: F401  (registers quantized_decomposed.*.out)

        return bytes(edge.to_executorch().buffer)


def build_report(plan: Plan, edge) -> Report:
    """Placement of every compute op (``plan``, the plan ``edge`` was lowered with) and the
    per-partition compiler output."""
    infos = _delegate_infos(edge)
    cpu_kernels = _cpu_kernels(edge) if cortex_m_core(plan.target) else {}
    ops = []
    for n in plan.nodes:
        if n.partition is not None:
            ops.append(OpPlacement(n.node, n.op, f"NPU partition {n.partition}", "npu", "",
                                   n.macs, n.inputs, n.ident, _BITS.get(n.bits, "")))
            continue
        reason = n.verdict.reason or "its neighbours left no NPU partition worth making"
        if n.ident in plan.portable:
            reason = f"{reason}; {plan.portable[n.ident]}"
        kernel = cpu_kernels.get(n.ident, "float")
        ops.append(OpPlacement(n.node, n.op, _CPU_PLACES[kernel],
                               "portable" if kernel in ("float", "int8") else "cortex-m",
                               reason, n.macs, n.inputs, n.ident,
                               "" if kernel == "float" else
                               _BITS.get(8 if kernel == "cortex-m" else n.bits, "")))
    parts = [
        PartitionInfo(k, list(names), info.get("compiler", "?"), info.get("tflite_ops", []),
                      info.get("stats", {}))
        for k, (names, info) in enumerate(zip(plan.partitions, infos))
    ]
    compilers = sorted({p.compiler for p in parts}) or ["none"]
    notes = [n for info in infos for n in info.get("notes", [])]
    from .deployability import HOST_ONLY_COMPILER, edge_payloads, versions_record

    return Report(plan.target.name, "+".join(compilers), ops, parts, notes=notes,
                  host_only=HOST_ONLY_COMPILER in compilers,
                  versions=versions_record(plan.target, [c for c in compilers if c != "none"],
                                           edge_payloads(edge)))


_BITS = {8: "int8", 16: "int16"}

_CPU_PLACES = {
    "cortex-m": "Cortex-M int8 kernel",
    "fused": "fused into a Cortex-M kernel",
    "int8": "portable kernel (int8 data)",
    "float": "portable float kernel",
}


def _cpu_kernels(edge) -> dict[str, str]:
    """ATen node id -> how the CPU runs it after Cortex-M lowering: "cortex-m" when an op it
    became is a Cortex-M kernel, "int8" / "float" when it is a portable kernel on int8 /
    float data, and "fused" when nothing of it is left (an activation folded into the
    kernel before it)."""
    kernels: dict[str, str] = {}
    for node in edge.exported_program().graph.nodes:
        ident = node_id(node)
        if ident is None or node.op != "call_function":
            continue
        if is_cortex_m(node):
            kernels[ident] = "cortex-m"
        elif kernels.get(ident) != "cortex-m":
            val = node.meta.get("val")
            int8 = isinstance(val, torch.Tensor) and val.dtype == torch.int8
            kernels[ident] = "int8" if int8 and kernels.get(ident) != "float" else "float"
    return _FusedDefault(kernels)


class _FusedDefault(dict):
    """Ids with no op left were absorbed by the Cortex-M kernel they followed."""

    def get(self, key, default=None):
        return super().get(key, "fused" if key is not None else default)


def _delegate_infos(edge) -> list[dict]:
    gm = edge.exported_program().graph_module
    infos = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and "executorch_call_delegate" in str(node.target):
            lowered = getattr(gm, node.args[0].target)
            infos.append(lowered.meta.get("_delegate_info_meta", {}))
    return infos


ACCURACY_SAMPLES = 8
"""Calibration samples the report's SQNR is measured on, all outputs together: one small
output makes an SQNR swing by several dB."""


def measure_accuracy(float_model, reference, prog: CompiledProgram, samples) -> dict:
    """SQNR (dB) of the host-run ``.pte`` and of the quantized reference (evaluated exactly,
    in float64, so the figure is the same on every host) against float, over every output of
    every sample. An int8-I/O program runs on the samples quantized with its input
    parameters, its outputs dequantized with its output parameters."""
    from .metrics import flat_outputs, sqnr_db
    from .quantization.exact import run_exact

    refs, tests, floats = [], [], []
    with torch.no_grad():
        for s in samples:
            floats += flat_outputs(float_model(*s))
            refs += flat_outputs(run_exact(reference, *s))
            tests += flat_outputs(prog.dequantize_outputs(prog.run(*prog.quantize_inputs(*s))))
    f = torch.cat(floats)
    return {
        "sqnr_db": round(sqnr_db(f, torch.cat(tests)), 2),
        "reference_sqnr_db": round(sqnr_db(f, torch.cat(refs)), 2),
    }


class LoadedProgram:
    """A ``.pte`` read back for host execution, with its compile report when it has one."""

    def __init__(self, program):
        self._program = program

    def run(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        return self._program.run(*inputs)

    @property
    def report(self) -> Report | None:
        raw = self._program.named_data.get(REPORT_KEY)
        if raw is None:
            return None
        report = Report.from_json(raw)
        if not report.kernels:  # read from the serialized program, not stored in it
            from .kernels_list import fill_report

            fill_report(report, self._program)
        if not report.memory:  # stored unless it did not fit beside the accuracy
            from .report.memory import memory_report

            report.memory = memory_report(self._program, None, report)
        return report

    @property
    def input_specs(self):
        return self._program.input_specs

    def quantize_inputs(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """See ``CompiledProgram.quantize_inputs`` (uses the report stored in the file)."""
        report = self.report
        return quantize_inputs(report.io if report else {}, inputs)

    def dequantize_outputs(self, outputs) -> list[torch.Tensor]:
        """See ``CompiledProgram.dequantize_outputs`` (uses the report stored in the file)."""
        report = self.report
        return dequantize_outputs(report.io if report else {}, outputs)


def load(path_or_bytes) -> LoadedProgram:
    """Read a ``.pte`` (path or bytes) for execution on the host."""
    from .runtime import load_program

    if isinstance(path_or_bytes, (str, os.PathLike)) and not Path(path_or_bytes).is_file():
        raise InvalidProgramError(f"program file {str(path_or_bytes)!r} not found")
    return LoadedProgram(load_program(path_or_bytes))
