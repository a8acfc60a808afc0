"""Whole-model latency estimate: NPU (Vela's cycles; a Neutron bound), Cortex-M kernels,
transposes and quantize/dequantize, per step and in total.

The estimate walks the lowered Edge program in execution order and gives one row per step
that does work:

- an NPU delegate call. With Vela's statistics (Ethos-U) the row is Vela's *total* cycles at
  the clock Vela planned for (``stats["total_cycles"] / stats["clock_hz"]``): an estimate,
  which Vela itself says is approximate. Without them (Neutron, the reference compiler) it is
  a lower **bound**: the larger of the MACs at the NPU's MACs per cycle and the bytes the
  partition must move at least once (weights, inputs, outputs) at the NPU's
  ``bytes_per_cycle``.
- the CPU work the device runtime does around a delegate call: the Ethos-U runtime copies
  every input into the NPU's scratch and every output back (memcpy), the Neutron runtime
  transposes each input and output whose format flag says so (NCHW <-> NHWC on the CPU).
- every CPU op: its kernel class and work from ``cpu_cycles.op_work``, cycles from the
  core's coefficients (``cpu_cycles.CORES``) at the CPU clock.

Views, ``getitem`` and memory allocation do no work and get no row. The rows' ``us`` sum to
``latency_us`` (before rounding); ``npu_us`` sums the NPU rows, ``cpu_us`` the rest.
"""

from __future__ import annotations

import math

from ..graph.delegate_call import is_delegate_call
from ..graph.ids import node_id
from .cpu_cycles import CoreModel, Work, core_model, op_work, work_cycles

_DECIMALS = 3


def estimate_latency(program, target, report) -> dict:
    """Latency of the lowered Edge ``program`` on ``target`` (``report``: its placement and
    partition stats): ``latency_us``, ``npu_us``, ``cpu_us``, ``rows`` (one per step that
    does work, in program order), the clocks, the CPU model and a ``method`` note."""
    core = core_model(target.cpu.core) if target.cpu is not None else None
    cpu_hz = target.cpu.clock_hz if target.cpu is not None else None
    gm = program.graph_module
    rows: list[dict] = []
    skipped: list[str] = []
    partition = 0
    edges = boundary_edges(program)
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        if is_delegate_call(node):
            info = report.partitions[partition] if partition < len(report.partitions) else None
            made = _delegate_rows(node, gm, info, partition, target, report, core, cpu_hz)
            for r in made:
                where = r.pop("_io", None)
                if where is not None and where in edges:
                    r["boundary"] = edges[where]
            rows += made
            partition += 1
            continue
        work = op_work(node)
        if work is None:
            continue
        if core is None:
            skipped.append(node.name)
            continue
        rows.append(_cpu_row(node.name, _op_label(node), work, core, cpu_hz))
        where = edges.get(node)
        if where is not None and work.kind in BOUNDARY_WORK:
            rows[-1]["boundary"] = where
        if node_id(node) is not None:
            rows[-1]["ident"] = node_id(node)  # the compute op it runs (report.ops)
    npu_us = sum((r["us"] for r in rows if r["runs_on"] == "npu"), 0.0)
    cpu_us = sum((r["us"] for r in rows if r["runs_on"] != "npu"), 0.0)
    for r in rows:
        r["us"] = round(r["us"], _DECIMALS)
        r["cycles"] = int(round(r["cycles"]))
    result = {
        "latency_us": round(npu_us + cpu_us, _DECIMALS),
        "npu_us": round(npu_us, _DECIMALS),
        "cpu_us": round(cpu_us, _DECIMALS),
        "npu_clock_hz": target.npu.clock_hz,
        "cpu_clock_hz": cpu_hz,
        "cpu_core": core.name if core else None,
        "npu_is_bound": any(r["runs_on"] == "npu" and r["basis"].startswith("bound")
                            for r in rows),
        "method": _method(core, target),
        "rows": rows,
        "npu_ops": npu_op_times(report, target),
        "boundary_us": boundary_us(rows),
    }
    if skipped:
        result["not_estimated"] = skipped
    return result


BOUNDARY_WORK = ("quantize", "dequantize", "transpose")
"""The CPU work that converts program inputs and outputs: what ``inputs=`` / ``outputs=``
(``io_spec``) can take off the CPU."""


def boundary_edges(program) -> dict:
    """What touches the program's boundary -> ``"input i"`` / ``"output i"``: an op reading
    user input ``i`` or making output ``i`` (a node), and a delegate call's argument or
    result there (``(delegate node, "input"|"output", k)``)."""
    graph = program.graph
    names = list(program.graph_signature.user_inputs)
    placeholders = {n: f"input {names.index(n.name)}" for n in graph.nodes
                    if n.op == "placeholder" and n.name in names}
    outs = graph.output_node().args[0]
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    made = {n: f"output {i}" for i, n in enumerate(outs) if hasattr(n, "op")}
    edges: dict = {}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if is_delegate_call(node):
            for k, a in enumerate(x for x in node.args[1:] if hasattr(x, "meta")):
                at = placeholders.get(a) or edges.get(a)  # the input, or its quantize
                if at is not None:
                    edges[(node, "input", k)] = at
            for u in node.users:  # getitem k, read by the output or its dequantize
                k = u.args[1] if len(u.args) > 1 and isinstance(u.args[1], int) else 0
                at = made.get(u) or next((made[v] for v in u.users if v in made), None)
                if at is not None:
                    edges[(node, "output", k)] = at
            continue
        read = [placeholders[a] for a in node.args if hasattr(a, "op") and a in placeholders]
        if read:
            edges[node] = read[0]
        elif node in made:
            edges[node] = made[node]
    return edges


def boundary_us(rows: list[dict]) -> dict:
    """µs of CPU work converting the program's inputs and outputs, per ``"input i"`` /
    ``"output i"`` and in total (``"total"``)."""
    out: dict = {}
    for r in rows:
        if "boundary" in r:
            out[r["boundary"]] = round(out.get(r["boundary"], 0.0) + r["us"], _DECIMALS)
    out["total"] = round(sum(out.values()), _DECIMALS)
    return out


VELA_LAYER_BASIS = "Vela's per-layer cycles (estimate)"
PEAK_BASIS = "MACs at the NPU's peak MACs per cycle (a lower bound, no per-layer figure)"


def npu_op_times(report, target) -> dict:
    """Per NPU compute op: ``{node: {"cycles", "us", "basis"}}``. Vela's per-layer cycles
    where Vela compiled the partition (an op fused into the operator before it: 0; cycles
    of operators the converter added, such as boundary transposes, are the partition's
    ``other_cycles``), else the op's MACs at the NPU's peak (``PEAK_BASIS``)."""
    by_ident = {o.ident: o for o in report.ops if o.kernel == "npu"}
    out: dict[str, dict] = {}
    for p in report.partitions:
        cycles = p.stats.get("op_cycles")
        clock = p.stats.get("clock_hz") or target.npu.clock_hz
        if not isinstance(cycles, dict):
            continue
        for ident, c in cycles.items():
            op = by_ident.get(ident)
            if op is not None:
                out[op.node] = {"cycles": int(c), "us": round(c / clock * 1e6, _DECIMALS),
                                "basis": VELA_LAYER_BASIS}
    for op in by_ident.values():
        if op.node not in out and op.macs:
            c = op.macs / target.npu.macs_per_cycle
            out[op.node] = {"cycles": int(math.ceil(c)),
                            "us": round(c / target.npu.clock_hz * 1e6, _DECIMALS),
                            "basis": PEAK_BASIS}
    return out


def _method(core: CoreModel | None, target) -> str:
    cpu = (f"CPU: {core.name} ({core.simd}) cycles per kernel class at "
           f"{target.cpu.clock_hz / 1e6:g} MHz; MAC coefficients fitted to {core.basis}, "
           "per-element, per-byte and per-call terms assumed (estimate.cpu_cycles)"
           if core else "CPU: none in this target, CPU ops not estimated")
    bandwidth = target.npu.bytes_per_cycle, target.npu.bandwidth_source
    return ("NPU: Vela's total cycles at its clock (an estimate) where Vela compiled the "
            "partition, else a lower bound max(MACs / MACs per cycle, bytes moved / "
            f"bandwidth) at {target.npu.clock_hz / 1e6:g} MHz, bandwidth "
            f"{bandwidth[0]} B/cycle ({bandwidth[1]}). {cpu}. The device runtime's copies "
            "and transposes of delegate I/O are charged to the CPU.")


def _op_label(node) -> str:
    return getattr(node.target, "__name__", str(node.target)).rsplit(".", 1)[0]


def _cpu_row(name: str, op: str, work: Work, core: CoreModel, cpu_hz: int) -> dict:
    cycles, basis = work_cycles(work, core)
    return {"node": name, "op": op, "runs_on": work.runs_on, "kind": work.kind,
            "cycles": cycles, "us": cycles / cpu_hz * 1e6, "basis": basis,
            "work": work.amount, "unit": work.unit}


def _tensor(node):
    val = node.meta.get("val") if hasattr(node, "meta") else None
    return val if hasattr(val, "shape") else None


def _nbytes(t) -> int:
    return math.prod(int(d) for d in t.shape) * t.element_size() if t is not None else 0


def _delegate_io(node) -> tuple[list, list]:
    """The delegate call's input and output tensors (fake values)."""
    inputs = [_tensor(a) for a in node.args[1:] if hasattr(a, "meta")]
    out = node.meta.get("val")
    outputs = list(out) if isinstance(out, (list, tuple)) else [out]
    return [t for t in inputs if t is not None], [t for t in outputs if hasattr(t, "shape")]


def _delegate_rows(node, gm, info, k: int, target, report, core, cpu_hz) -> list[dict]:
    lowered = getattr(gm, node.args[0].target)
    stats = dict(info.stats) if info is not None else {}
    inputs, outputs = _delegate_io(node)
    name = f"npu partition {k}"
    if "total_cycles" in stats and stats.get("clock_hz"):
        cycles, clock = stats["total_cycles"], stats["clock_hz"]
        basis = f"Vela's total cycles at {clock / 1e6:g} MHz (estimate)"
    else:
        cycles, clock, basis = _npu_bound(lowered, k, target, report, inputs, outputs)
    rows = [{"node": name, "op": "executorch_call_delegate", "runs_on": "npu", "kind": "npu",
             "cycles": cycles, "us": cycles / clock * 1e6, "basis": basis,
             "work": stats.get("macs", _partition_macs(report, k)), "unit": "MACs"}]
    if core is None:
        return rows
    for what, tensors in (("input", inputs), ("output", outputs)):
        for i, t in enumerate(tensors):
            moved = _runtime_move(target, lowered, what, i, t)
            if moved is not None:
                kind, op = moved
                rows.append(_cpu_row(f"{name} {what} {i}", op,
                                     Work(kind, "cortex-m", "bytes", _nbytes(t)), core, cpu_hz))
                if kind in BOUNDARY_WORK:
                    rows[-1]["_io"] = (node, what, i)
    return rows


def _runtime_move(target, lowered, what: str, i: int, t):
    """(kind, label) of the CPU work the device runtime does on one delegate input or
    output, or None: a runtime that copies bytes as they lie (Ethos-U) memcpys each one, one
    that transposes flagged tensors (Neutron, ``NpuSpec.runtime_transposes_io``) transposes
    the flagged ones (``device.delegate_io.neutron_transposes``) unless already channels last."""
    from ..npu.families import family

    runtime = family(target.npu.kind)
    if not target.npu.runtime_transposes_io or runtime.argument_formats is None:
        return "copy", f"{runtime.backend_id} memcpy"
    from ..device.delegate_io import is_channels_last, neutron_transposes

    flags = runtime.argument_formats(bytes(lowered.processed_bytes))
    if flags is None:
        return None
    flag_list = flags[0] if what == "input" else flags[1]
    if i >= len(flag_list) or not neutron_transposes(t.shape, flag_list[i]):
        return None
    if is_channels_last(tuple(t.dim_order())):
        return None
    return "transpose", f"{runtime.backend_id} NCHW<->NHWC transpose"


def _partition_macs(report, k: int) -> int:
    place = f"NPU partition {k}"
    return sum(o.macs for o in report.ops if o.placement == place)


def _weight_bytes(lowered, target) -> int:
    """Bytes of the partition's constant tensors: a vendor payload's weights as its runtime
    reads them (``NpuFamily.memory_figures``), else the partition's int8 weights and int32
    biases as stored."""
    from ..device.payload import is_container, unpack_reference
    from ..npu.families import family

    processed = bytes(lowered.processed_bytes)
    if not is_container(processed):
        try:
            return family(target.npu.kind).memory_figures(processed)["weights"]
        except Exception:  # noqa: BLE001  (not its family's payload: count the constants)
            pass
    ep = lowered.original_module
    total = 0
    for tensor in (*ep.state_dict.values(), *ep.constants.values()):
        if hasattr(tensor, "shape") and hasattr(tensor, "element_size"):
            total += _nbytes(tensor)
    if total == 0 and is_container(processed):
        total = len(unpack_reference(processed)[0].buffer)
    return total


def _transpose_bytes(lowered) -> int:
    """Bytes the partition's TRANSPOSE operators read and write (twice each tensor), from a
    reference payload's graph; 0 for a vendor payload, whose graph is not at hand. A
    transpose does no MACs, so only this traffic puts it in the bound."""
    from ..device.payload import is_container, unpack_reference

    processed = bytes(lowered.processed_bytes)
    if not is_container(processed):
        return 0
    from ..tflite.builder import BUILTIN_NAMES, NUMPY_TYPES
    from ..tflite.describe import load_model

    model = load_model(unpack_reference(processed)[0].buffer)
    graph, total = model.subgraphs[0], 0
    for op in graph.operators:
        code = model.operatorCodes[op.opcodeIndex]
        if code.customCode or BUILTIN_NAMES.get(code.builtinCode) != "TRANSPOSE":
            continue
        t = graph.tensors[op.inputs[0]]
        total += 2 * math.prod(int(d) for d in t.shape) * NUMPY_TYPES[t.type].itemsize
    return total


def _npu_bound(lowered, k, target, report, inputs, outputs) -> tuple[float, int, str]:
    npu = target.npu
    macs = _partition_macs(report, k)
    per_cycle = npu.bytes_per_cycle
    shuffled = _transpose_bytes(lowered)
    moved = _weight_bytes(lowered, target) + sum(map(_nbytes, inputs)) + sum(map(_nbytes, outputs)) \
        + shuffled
    compute = macs / npu.macs_per_cycle
    memory = moved / per_cycle
    which = "MACs" if compute >= memory else "bytes"
    transposes = f", {shuffled:,} of them transposed" if shuffled else ""
    basis = (f"bound ({which}): max({macs:,} MACs / {npu.macs_per_cycle} per cycle, "
             f"{moved:,} B{transposes} / {per_cycle} B per cycle)")
    return max(compute, memory), npu.clock_hz, basis
