"""Flash and RAM a serialized program needs, against the target's memory regions.

Every figure is read from the ``.pte`` itself, as the device runtime reads it:

- flash: the program's size; of it, the constant tensors (weights the CPU kernels read), the
  NPU payloads (Vela's command stream and weights; Neutron's microcode, weights and kernels;
  the reference compiler's graph), the partition graphs kept for the host emulator and the
  compile report (named data the device never reads, but the array still carries);
- RAM: ExecuTorch's planned buffers (``non_const_buffer_sizes`` per memory id; id 0 is
  reserved and empty), of which the program's inputs and outputs; the NPU scratch the
  delegate allocates from the temp allocator at each call (Vela: the bin stream's
  ``scratch_size``, which also holds the NPU's inputs and outputs; Neutron: the microcode
  header's scratch, profile, debug and SRAM-weights sizes plus the CPU transposes of
  channels-last tensors; the reference payload: an estimate, the peak of live tensors of the
  partition graph); and an estimate of the method allocator's needs (``method_allocator``).

The temp allocator is reset after every instruction (ExecuTorch ``Method::step``), so the
scratch needed is the largest single call's, not the sum. Each region of the target's memory
map (``targets.MemoryRegion.holds``) is then checked: the program in the region holding
"program", everything the program writes in the one holding "ram", Vela's fast scratch in
the one holding "fast_scratch". An NPU that cannot read the program's region (Neutron reads
no flash) needs the program where it can, unless its payloads fetch weights to SRAM.

All sizes are bytes. The dict goes into ``Report.memory``; its ``summary`` joins
``Report.summary``.
"""

from __future__ import annotations

import math

from ..device.sizes import POINTER, align
from ..errors import ConfigError, InvalidProgramError, MemoryFitError, warn_user

EVALUE = 16
"""sizeof(EValue): an 8-byte payload union (int64, double, pointers) and a 4-byte tag,
aligned to 8."""
TENSOR_IMPL = 32
"""sizeof(TensorImpl) on 32 bits: sizes, dim_order, strides and data pointers, dim, numel and
its bound, scalar type, shape dynamism and device (runtime/core/portable_type/tensor_impl.h);
an estimate."""
BACKEND_DELEGATE = 32
"""sizeof(BackendDelegate): backend pointer, handle and the processed-data FreeableBuffer."""
BACKEND_HANDLE = 256
"""What a backend's ``init`` takes from the method allocator: its handle and configuration
(EthosUBackend: the execution handle; NeutronBackend: its configuration and the driver's
model context, whose size the driver decides); an estimate."""
COMPILE_SPEC = 12
"""sizeof(CompileSpec): key pointer, value pointer and length."""
CHAIN = 16
"""sizeof(Chain): the serialized chain, the argument-list span and the kernel array."""
INSTRUCTION = 4 + 8
"""Per instruction of a chain: an OpFunction pointer and an InstructionArgs span."""


# --- reading the program ----------------------------------------------------------------
def _program(program, size: int | None = None):
    """(runtime Program, size in bytes or None)."""
    from ..runtime.pte import Program

    if isinstance(program, (bytes, bytearray, memoryview)):
        data = bytes(program)
        return Program(data), len(data)
    if isinstance(program, Program):
        size = size if size is not None else getattr(program, "size", None)
        data = getattr(program, "data", None)
        return program, size if size is not None else (len(data) if data else None)
    raise TypeError(f"memory_report takes .pte bytes or a runtime Program, not "
                    f"{type(program).__name__}")


def _kind(val) -> str:
    return type(val).__name__


def _tensor_bytes(t) -> int:
    from ..runtime.kernels import dtype_of

    itemsize = dtype_of(t.scalar_type).itemsize
    return math.prod(int(d) for d in t.sizes) * itemsize


def _is_static(t) -> bool:
    dynamism = getattr(t, "shape_dynamism", 0)
    return int(getattr(dynamism, "value", dynamism)) == 0


def method_allocator_bytes(plan) -> int:
    """Estimate of what ExecuTorch's ``Method::load`` (runtime/executor/method.cpp,
    tensor_parser_portable.cpp) takes from the method allocator for ``plan`` on a 32-bit
    core, every allocation rounded up to 4 bytes:

    - the values array (one ``EValue`` per value) and the input-set flags;
    - per tensor value a ``TensorImpl`` and its strides (4 bytes per dim), and for a tensor
      whose shape is not static its own sizes (4 per dim) and dim order (1 per dim);
    - per int list a ``BoxedEvalueList`` (16), its EValue pointers and an int64 per item;
      per tensor list the pointers and a Tensor per item; per optional-tensor list an
      8-byte optional per item; per bool / double list or string an ``ArrayRef`` (8);
    - the delegates array, each delegate's compile specs and what its backend's ``init``
      allocates (``BACKEND_HANDLE``, an estimate);
    - the chains, per instruction a kernel pointer and an argument span, and per kernel or
      delegate call one EValue pointer per argument;
    - the planned-buffer spans the firmware hands the HierarchicalAllocator (8 each).

    Not counted: the planned buffers themselves (``planned``; some runners carve them from
    the same pool, e.g. ExecuTorch's Arm runner), the ``Method`` and ``Program`` objects,
    the kernels' temp allocations (temp allocator).
    """
    total = align(len(plan.values) * EVALUE) + align(len(plan.inputs))
    for evalue in plan.values:
        val, kind = evalue.val, _kind(evalue.val)
        if kind == "Tensor":
            dim = len(val.sizes)
            total += TENSOR_IMPL + align(4 * dim)
            if not _is_static(val):
                total += align(4 * dim) + align(dim)
        elif kind == "IntList":
            n = len(val.items)
            total += 16 + align(POINTER * n) + 8 * n
        elif kind == "TensorList":
            n = len(val.items)
            total += 16 + align(POINTER * n) + POINTER * n
        elif kind == "OptionalTensorList":
            n = len(val.items)
            total += 16 + align(POINTER * n) + 8 * n
        elif kind == "BoolList":
            total += 8 + align(len(val.items))
        elif kind in ("DoubleList", "String"):
            total += 8
    for delegate in plan.delegates:
        total += BACKEND_DELEGATE + COMPILE_SPEC * len(delegate.compile_specs) + BACKEND_HANDLE
    for chain in plan.chains:
        total += CHAIN + INSTRUCTION * len(chain.instructions)
        for instruction in chain.instructions:
            args = getattr(instruction.instr_args, "args", None)
            if args is not None:
                total += POINTER * len(args)
    total += 8 * len(plan.non_const_buffer_sizes) + 16
    return total


def _host_graph_tensors(blob: bytes) -> tuple[int, int]:
    """(constant bytes, peak of live tensor bytes) of a reference payload's TFLite graph:
    tensors live from the op writing them (graph inputs from the start) to the last op
    reading them (graph outputs to the end)."""
    from ai_edge_litert import schema_py_generated as schema

    from ..device.payload import unpack

    tflite = unpack(blob)["tflite"]
    model = schema.Model.GetRootAs(tflite, 0)
    graph = model.Subgraphs(0)
    sizes = {schema.TensorType.INT8: 1, schema.TensorType.UINT8: 1, schema.TensorType.BOOL: 1,
             schema.TensorType.INT16: 2, schema.TensorType.FLOAT16: 2,
             schema.TensorType.INT32: 4, schema.TensorType.FLOAT32: 4,
             schema.TensorType.INT64: 8}
    nbytes, constant = {}, set()
    weights = 0
    for i in range(graph.TensorsLength()):
        t = graph.Tensors(i)
        buf = model.Buffers(t.Buffer())
        data = buf.Size() if buf.Offset() > 1 else buf.DataLength()
        n = math.prod(t.ShapeAsNumpy().tolist()) if t.ShapeLength() else 1
        nbytes[i] = n * sizes.get(t.Type(), 4)
        if data:
            constant.add(i)
            weights += data
    n_ops = graph.OperatorsLength()
    ops = [graph.Operators(k) for k in range(n_ops)]
    first, last = {}, {}
    for i in range(graph.InputsLength()):
        first[graph.Inputs(i)] = -1
    for k, op in enumerate(ops):
        for j in range(op.InputsLength()):
            t = op.Inputs(j)
            if t >= 0:
                last[t] = k
        for j in range(op.OutputsLength()):
            first.setdefault(op.Outputs(j), k)
    for i in range(graph.OutputsLength()):
        last[graph.Outputs(i)] = n_ops
    peak = 0
    for k in range(-1, n_ops + 1):
        live = sum(nbytes[t] for t, start in first.items() if t not in constant
                   and start <= k <= last.get(t, start))
        peak = max(peak, live)
    return weights, peak


def payload_figures(delegate_id: str, blob: bytes) -> dict:
    """Flash parts and per-call scratch of one NPU payload, read as its runtime reads it
    (``NpuFamily.memory_figures``)."""
    from ..device.payload import is_container
    from ..npu.families import family_of_backend

    if is_container(blob):
        weights, scratch = _host_graph_tensors(blob)
        return {"weights": weights, "commands": 0, "scratch": scratch, "estimated": True,
                "in_place": True, "formats": None}
    family = family_of_backend(delegate_id)
    if family is not None:
        return family.memory_figures(blob)
    # another backend's payload: its size counts, its scratch is unknown
    return {"weights": 0, "commands": 0, "scratch": 0, "estimated": True, "in_place": False,
            "formats": None}


def _transposes(formats, args, plan) -> int:
    """Bytes of the buffers NeutronBackend allocates to transpose channels-last inputs and
    outputs on the CPU (flag 1), 16-byte aligned (an upper bound: it skips tensors already
    channels-last and those with one channel)."""
    in_fmt, in_map, out_fmt, out_map, n_args = formats
    total = 0
    for flag, index in list(zip(in_fmt, in_map)) + [(f, n_args + m) for f, m in
                                                    zip(out_fmt, out_map)]:
        if flag == 1 and index < len(args):
            val = plan.values[args[index]].val
            if _kind(val) == "Tensor":
                total += align(_tensor_bytes(val), 16)
    return total


def _plan_figures(plan, delegate_data) -> dict:
    """RAM figures of one method, and the flash parts of its NPU payloads."""
    planned = [int(n) for n in plan.non_const_buffer_sizes]
    io = {}
    unplanned_io = 0
    for kind, indices in (("inputs", plan.inputs), ("outputs", plan.outputs)):
        total = 0
        for i in indices:
            val = plan.values[i].val
            if _kind(val) != "Tensor":
                continue
            n = _tensor_bytes(val)
            total += n
            if val.allocation_info is None and val.data_buffer_idx == 0:
                unplanned_io += n
        io[kind] = total
    payloads, scratch, estimated, in_place = {}, 0, False, False
    for chain in plan.chains:
        for instruction in chain.instructions:
            call = instruction.instr_args
            if _kind(call) != "DelegateCall":
                continue
            delegate = plan.delegates[call.delegate_index]
            ref = delegate.processed
            key = (int(getattr(ref.location, "value", ref.location)), ref.index)
            blob = delegate_data(ref)
            if key not in payloads:
                payloads[key] = dict(payload_figures(delegate.id, blob), bytes=len(blob))
            p = payloads[key]
            need = p["scratch"]
            if p["formats"] is not None:
                need += _transposes(p["formats"], list(call.args), plan)
            scratch = max(scratch, need)
            estimated |= p["estimated"]
            in_place |= p["in_place"]
    return {"planned": planned, "inputs": io["inputs"], "outputs": io["outputs"],
            "unplanned_io": unplanned_io, "npu_scratch": scratch,
            "npu_scratch_estimated": estimated, "npu_reads_program": in_place,
            "method_allocator": method_allocator_bytes(plan), "payloads": payloads}


# --- the report -----------------------------------------------------------------------
def program_figures(program, size: int | None = None) -> dict:
    """The target-free figures of ``program`` (``.pte`` bytes or ``runtime.pte.Program``):
    ``flash`` and ``ram`` as in ``memory_report`` (``ram`` of the method needing the most,
    as one method is loaded and run at a time), and ``npu_reads_program``: an NPU payload
    reads its weights where the program lies. ``size``: the program's bytes, for a Program
    that does not record them."""
    prog, size = _program(program, size)
    pte = prog._pte
    inline = pte.program.backend_delegate_data

    def delegate_data(ref) -> bytes:
        location = int(getattr(ref.location, "value", ref.location))
        if location != 0:
            raise InvalidProgramError("a delegate payload is stored outside the program "
                                      "(segment); the memory report reads inline payloads")
        return bytes(inline[ref.index].data)

    methods = [_plan_figures(plan, delegate_data) for plan in pte.program.execution_plan]
    largest = max(methods, key=lambda m: sum(m["planned"]) + m["method_allocator"]
                  + m["npu_scratch"] + m["unplanned_io"])
    payloads = {k: p for m in methods for k, p in m["payloads"].items()}
    named = prog.device_named_data
    flash = {
        "program": size,
        "constants": sum(len(_storage(b)) for b in pte.program.constant_buffer),
        "npu_payloads": sum(p["bytes"] for p in payloads.values()),
        "npu_weights": sum(p["weights"] for p in payloads.values()),
        "npu_commands": sum(p["commands"] for p in payloads.values()),
        "named_data": sum(len(v) for v in named.values()),
    }
    flash["tables"] = (size - flash["constants"] - flash["npu_payloads"] - flash["named_data"]
                       if size is not None else None)
    planned = largest["planned"]
    ram = {
        "planned": planned,
        "planned_total": sum(planned),
        "inputs": largest["inputs"],
        "outputs": largest["outputs"],
        "io_planned": largest["unplanned_io"] == 0,
        "npu_scratch": largest["npu_scratch"],
        "npu_scratch_estimated": largest["npu_scratch_estimated"],
        "method_allocator": largest["method_allocator"],
    }
    ram["peak"] = (ram["planned_total"] + ram["method_allocator"] + ram["npu_scratch"]
                   + largest["unplanned_io"])
    return {"flash": flash, "ram": ram, "has_npu": bool(payloads),
            "npu_reads_program": any(m["npu_reads_program"] for m in methods)}


def placed_target(report):
    """The target ``report`` was compiled for, placed as it says (``report.placement``);
    None when it names no known target."""
    from ..targets import get_target

    try:
        target = get_target(getattr(report, "target", None))
        return target.placed((getattr(report, "placement", None) or {}).get("memory", ""))
    except ConfigError:
        return None


def memory_report(program, target, report) -> dict:
    """Memory figures of ``program`` (``.pte`` bytes or ``runtime.pte.Program``) on
    ``target`` (None: the report's; {} when the report names no known target)."""
    from ..targets import get_target

    if target is None:
        target = placed_target(report)
        if target is None:
            return {}
    else:
        target = get_target(target)
    figures = program_figures(program)
    flash, ram = figures["flash"], figures["ram"]
    size = flash["program"]
    fast_scratch = max([int(p.stats.get("fast_scratch_bytes", 0))
                        for p in getattr(report, "partitions", None) or []] or [0])
    if fast_scratch:
        ram["fast_scratch"] = fast_scratch
    notes = []
    needs = {"program": size or 0, "ram": ram["peak"], "fast_scratch": fast_scratch}
    program_region = target.region_for("program")
    ram_region = target.region_for("ram")
    if (figures["has_npu"] and figures["npu_reads_program"] and program_region is not None
            and not program_region.npu_access and ram_region is not None):
        needs["ram"] += needs["program"]
        needs["program"] = 0
        notes.append(f"the NPU cannot read {program_region.name}: the program (its NPU "
                     f"weights) must lie in {ram_region.name}")
    if size is None:
        notes.append("the program's size is unknown (the loaded program does not keep its "
                     "bytes)")
    regions = []
    for r in target.memory:
        if not r.holds:
            continue
        need = sum(needs[role] for role in r.holds)
        row = {"name": r.name, "kind": r.kind, "size": r.size_bytes, "npu": r.npu_access,
               "holds": list(r.holds), "need": need}
        if r.size_bytes is not None:
            row["margin"] = r.size_bytes - need
            row["fits"] = need <= r.size_bytes
        regions.append(row)
    checked = [r for r in regions if "fits" in r]
    tightest = min(checked, key=lambda r: r["margin"], default=None)
    summary = {"flash_bytes": size, "ram_bytes": needs["ram"],
               "memory_fits": all(r["fits"] for r in checked)}
    if tightest is not None:
        summary["tightest_region"] = tightest["name"]
        summary["tightest_margin_bytes"] = tightest["margin"]
    out = {"target": target.name, "flash": flash, "ram": ram, "regions": regions,
           "summary": summary}
    where = ram_region if needs["program"] == 0 and size else program_region
    if where is not None:
        out["program_in"] = where.name
    if notes:
        out["notes"] = notes
    return out


def _storage(buffer) -> bytes:
    storage = getattr(buffer, "storage", b"")
    return storage if isinstance(storage, (bytes, bytearray)) else bytes(storage or b"")


# --- checking and showing -------------------------------------------------------------
def misfits(memory: dict) -> list[str]:
    """One message per region the program does not fit: the region, what it must hold, the
    need, the capacity, the shortfall and what to do."""
    messages = []
    ram = memory.get("ram", {})
    for r in memory.get("regions", []):
        if r.get("fits", True):
            continue
        parts = []
        if r["name"] == memory.get("program_in"):
            parts.append(f"the program {memory['flash']['program'] or 0:,}")
        if "ram" in r["holds"]:
            parts.append(f"planned buffers {ram.get('planned_total', 0):,}, method "
                         f"allocator ~{ram.get('method_allocator', 0):,} (estimate), NPU "
                         f"scratch {ram.get('npu_scratch', 0):,}")
        if "fast_scratch" in r["holds"]:
            parts.append(f"Vela's fast scratch {ram.get('fast_scratch', 0):,}")
        todo = ("shrink the activations (a smaller input, fewer channels, int8 I/O with "
                "io=\"int8\") or the weights, split the model, or place these buffers in a "
                "larger memory in the firmware")
        if r["name"] == memory.get("program_in") and "program" not in r["holds"]:
            todo += ("; the program counts here because the NPU cannot read flash (the "
                     "eIQ converter's fetch_constants_to_sram, NeutronOptions in "
                     "mcu_npu.npu.neutron.compiler, keeps the weights in flash and copies them to "
                     "SRAM as it runs)")
        messages.append(
            f"the program does not fit the {memory.get('target', 'target')}'s "
            f"{r['name']} ({r['kind']}, {r['size']:,} bytes): it needs {r['need']:,} bytes "
            f"({'; '.join(parts)}), {-r['margin']:,} bytes more than the region holds. "
            f"To fit: {todo}")
    return messages


def check_fit(report, strict: bool) -> None:
    """Warn (``strict``: raise ``MemoryFitError``) when the program does not fit: one
    warning per region, naming it, the need, the capacity, the margin and what to do."""
    problems = misfits(report.memory or {})
    if strict and problems:
        raise MemoryFitError("\n".join(problems))
    for p in problems:
        warn_user(p)
