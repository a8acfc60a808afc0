"""Report: the compile report of the lowered program, from the plan it was lowered with (where
each compute op runs and why) and the delegates' compiler output, with the program's I/O,
the precision asked for and the latency estimate."""

from __future__ import annotations

from dataclasses import replace

import torch

from ..backend.cortex_m import cortex_m_core, is_cortex_m
from ..errors import stage
from ..firmware.deployability import HOST_ONLY_COMPILER, edge_payloads, versions_record
from ..graph.delegate_call import is_delegate_call
from ..graph.ids import node_id
from ..graph.module_names import layer_name
from ..partition.plan import Plan
from ..quantization.precision import PrecisionChoice, PrecisionRequest
from ..report import OpPlacement, PartitionInfo, Report
from ..quantization.calibration.records import CALIBRATION_KEY
from ..quantization.calibration.bias_correction import CORRECTED_KEY
from ..quantization.calibration.whole_model import CHECK_KEY
from ..report.calibration import calibration_section
from ..estimate.latency import estimate_latency

ACTIVATION_UNIT_NOTE = (
    "int16 sigmoid and tanh run on the Ethos-U's activation unit (Vela rescales their input "
    "to Q3.12); the host runs LiteRT's int16 kernels (interpolated tables), which can differ "
    "from it by a few 1/32768 steps")
_ACTIVATION_UNIT_OPS = ("aten.sigmoid", "aten.tanh")


def write_report(decided: Plan, edge, target, io_params: dict, precision: PrecisionRequest,
                 choice: PrecisionChoice | None, facts: dict | None = None) -> Report:
    """The stage: ``build_report``, with the program's int8 I/O parameters, the precision
    asked for and what stayed int8, and the latency estimate on ``target``; ``facts``: the
    ops' layer names and shapes (``op_facts`` of the program before lowering)."""
    with stage("writing the compile report"):
        report = build_report(decided, edge, facts)
        report.io = io_params
        if not precision.all_int8:
            report.precision = {"request": precision.to_json(),
                                "kept_int8": dict(choice.kept_int8) if choice else {}}
            if target.npu.int16_sigmoid_tanh_q3_12 and any(
                    o.precision == "int16" and o.op in _ACTIVATION_UNIT_OPS
                    and o.kernel == "npu" for o in report.ops):
                report.notes.append(ACTIVATION_UNIT_NOTE)
        report.accuracy = {}
        report.latency = estimate_latency(edge.exported_program(), target, report)
    return report


def record_calibration(report: Report, reference, method: str) -> None:
    """Put in ``report`` how the activations were calibrated: each op's method (its output
    activation's) and the calibration section (``report.calibration``), from the records
    the quantizer left on the quantized ``reference`` (in place)."""
    records = getattr(reference, "meta", {}).get(CALIBRATION_KEY, {})
    report.ops = [replace(o, calibration=records[o.ident]["method"])
                  if o.ident in records else o for o in report.ops]
    names = {o.ident: o.node for o in report.ops if o.ident}
    check = getattr(reference, "meta", {}).get(CHECK_KEY)
    bias = getattr(reference, "meta", {}).get(CORRECTED_KEY)
    report.calibration = calibration_section(method, records, names, check, bias)


def build_report(plan: Plan, edge, facts: dict | None = None) -> Report:
    """Placement of every compute op (``plan``, the plan ``edge`` was lowered with) and the
    per-partition compiler output; ``facts`` as ``op_facts`` gives them (by default, of
    ``edge``)."""
    infos = _delegate_infos(edge)
    cpu_kernels = _cpu_kernels(edge) if cortex_m_core(plan.target) else {}
    facts = op_facts(edge) if facts is None else facts
    ops = []
    for n in plan.nodes:
        layer, ins, out = facts.get(n.ident, ("", (), ()))
        if n.partition is not None:
            ops.append(OpPlacement(n.node, n.op, f"NPU partition {n.partition}", "npu", "",
                                   n.macs, n.inputs, n.ident, _BITS.get(n.bits, ""),
                                   layer, ins, out))
            continue
        reason = n.verdict.reason or "its neighbours left no NPU partition worth making"
        if n.ident in plan.portable:
            reason = f"{reason}; {plan.portable[n.ident]}"
        kernel = cpu_kernels.get(n.ident, "float")
        ops.append(OpPlacement(n.node, n.op, _CPU_PLACES[kernel],
                               "portable" if kernel in ("float", "int8") else "cortex-m",
                               reason, n.macs, n.inputs, n.ident,
                               "" if kernel == "float" else
                               _BITS.get(8 if kernel == "cortex-m" else n.bits, ""),
                               layer, ins, out))
    parts = [
        PartitionInfo(k, list(names), info.get("compiler", "?"), info.get("tflite_ops", []),
                      info.get("stats", {}))
        for k, (names, info) in enumerate(zip(plan.partitions, infos))
    ]
    compilers = sorted({p.compiler for p in parts}) or ["none"]
    notes = [n for info in infos for n in info.get("notes", [])]
    return Report(plan.target.name, "+".join(compilers), ops, parts, notes=notes,
                  host_only=HOST_ONLY_COMPILER in compilers, program_io=program_io(edge),
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
        if is_delegate_call(node):
            lowered = getattr(gm, node.args[0].target)
            infos.append(lowered.meta.get("_delegate_info_meta", {}))
    return infos


# layer names and shapes -------------------------------------------------------------------
_QDQ = ("quantize_per", "dequantize_per")


def op_facts(edge) -> dict[str, tuple[str, tuple, tuple]]:
    """ATen node id -> (the model's layer name, the shapes of the activations the op reads,
    its output shape), from the lowered Edge program and its delegates' graphs."""
    facts: dict[str, tuple[str, tuple, tuple]] = {}
    for ep in _programs(edge.exported_program()):
        user_inputs = set(ep.graph_signature.user_inputs)
        for n in ep.graph.nodes:
            ident = node_id(n) if n.op == "call_function" else None
            if ident is None or any(q in str(n.target) for q in _QDQ):
                continue
            if ident not in facts:  # the first node of the op: what it reads
                ins = tuple(s for s in (_activation_shape(a, user_inputs)
                                        for a in n.all_input_nodes) if s is not None)
                facts[ident] = (layer_name(n), ins, ())
            layer, ins, _ = facts[ident]
            facts[ident] = (layer or layer_name(n), ins, _shape(n))  # the last: its result
    return facts


def _programs(ep):
    """``ep`` and the Edge programs of its delegates (what each NPU partition was made of)."""
    out = [ep]
    gm = ep.graph_module
    for node in gm.graph.nodes:
        if is_delegate_call(node):
            lowered = getattr(gm, node.args[0].target)
            if getattr(lowered, "original_module", None) is not None:
                out.append(lowered.original_module)
    return out


def _activation_shape(arg, user_inputs: set) -> tuple | None:
    """The shape of an activation ``arg`` carries (through quantize / dequantize), None for
    a weight or constant."""
    source = arg
    while source.op == "call_function" and any(q in str(source.target) for q in _QDQ) \
            and source.all_input_nodes:
        source = source.all_input_nodes[0]
    if source.op == "get_attr" or (source.op == "placeholder" and source.name not in
                                   user_inputs):
        return None
    return _shape(arg) or None


def _shape(n) -> tuple:
    val = n.meta.get("val")
    return tuple(int(d) for d in val.shape) if isinstance(val, torch.Tensor) else ()


def program_io(edge) -> dict:
    """The program's inputs and outputs: name, shape and dtype of each tensor."""
    ep = edge.exported_program()
    nodes = {n.name: n for n in ep.graph.nodes}
    (out,) = [n for n in ep.graph.nodes if n.op == "output"]

    def entry(name, n):
        val = n.meta.get("val") if n is not None else None
        if not isinstance(val, torch.Tensor):
            return {"name": name, "shape": [], "dtype": type(val).__name__}
        return {"name": name, "shape": list(val.shape), "dtype": str(val.dtype).split(".")[-1]}

    outputs = [a for a in torch.utils._pytree.tree_leaves(out.args[0])]
    return {"inputs": [entry(name, nodes.get(name)) for name in ep.graph_signature.user_inputs],
            "outputs": [entry(getattr(a, "name", str(a)), a if hasattr(a, "meta") else None)
                        for a in outputs]}
