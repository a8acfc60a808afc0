"""``mcu-npu check``: would a ``.pte`` run on a target's board? Read, never run.

Three questions, one line per problem found:

- does every delegate belong to the target's NPU runtime (its backend id) and is its payload
  one that runtime reads, with the tensors the ``.pte`` hands it (the NPU family's payload
  checks and I/O rules, ``npu.family.NpuFamily``: ``NeutronBackend.cpp``'s init and copy
  rules, ``EthosUBackend.cpp``'s bin stream and I/O checks);
- does a kernel library of the target provide every operator the program calls;
- does each delegate tensor arrive in the memory order its partition was converted for;
- does it fit in memory (not checked yet).
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import InvalidProgramError


class ProgramFile(NamedTuple):
    """A ``.pte`` as ``check`` reads it, with the flatbuffers runtime alone (no torch): its
    bytes, execution plans (``firmware.tables.Plan``) and named data (its own, then its
    companion's)."""

    data: bytes
    plans: list
    named_data: dict[str, bytes]


def read_program(data: bytes, host_data: dict[str, bytes] | None = None) -> ProgramFile:
    """``data`` read as a ``.pte`` (InvalidProgramError when it is none)."""
    from ..device.pte_file import envelope_problem
    from .tables import program_tables

    problem = envelope_problem(data)
    if problem is not None:
        raise InvalidProgramError(problem)
    try:
        plans, named = program_tables(data)
    except Exception as exc:  # flatbuffers and slicing raise many types on corrupt data
        raise InvalidProgramError(
            f"cannot parse the program: {type(exc).__name__}: {exc}") from exc
    if not plans:
        raise InvalidProgramError("the program has no methods")
    return ProgramFile(bytes(data), plans, {**named, **(host_data or {})})


def delegate_calls(program):
    """Per delegate call of every method: (index, backend id, processed bytes, input tensors,
    output tensors), each tensor (sizes, dim order, scalar type) as the ``.pte`` holds it and
    the arguments split as the device runtime splits them (by the payload's input count).
    ``program``: a ``ProgramFile`` or anything with the ``.pte`` bytes as ``data`` and its
    ``named_data`` (a ``runtime.pte.Program``)."""
    from ..device.delegate_calls import delegate_instructions, input_split
    from ..npu.families import families

    if not isinstance(program, ProgramFile):
        program = read_program(program.data, program.named_data)
    input_counts = {f.backend_id: f.input_count for f in families()}  # as the device runtimes
    calls = []
    for plan in program.plans:
        for _, _, call, delegate, n_outputs in delegate_instructions(plan):
            args = list(call.args)
            split = input_split(delegate.id, delegate.processed, program.named_data,
                                len(args), n_outputs, input_counts)
            tensors = [[_described(plan.values[i].val) for i in part
                        if type(plan.values[i].val).__name__ == "Tensor"]
                       for part in (args[:split], args[split:])]
            calls.append((len(calls), delegate.id, delegate.processed, *tensors))
    return calls


def _described(val) -> tuple:
    return tuple(val.sizes), tuple(val.dim_order), int(val.scalar_type)


def _dtype(code: int):
    """The element type (``device.pte_file.ScalarType``) of a ScalarType code."""
    from ..device.pte_file import scalar_type

    try:
        return scalar_type(code)
    except ValueError as exc:
        raise InvalidProgramError(str(exc)) from None


def payload_problems(target, data: bytes, inputs, outputs) -> list[str]:
    """Where the target's device runtime (or driver) would refuse a delegate's payload
    itself (``NpuFamily.payload_problems``)."""
    from ..device.payload import is_container
    from ..npu.families import family

    if is_container(data):
        return [f"a host-only payload (the reference compiler's mcu-npu container), not a "
                f"{target.npu.kind} NPU payload: the device runtime refuses it"]
    return family(target.npu.kind).payload_problems(data, inputs, outputs, target)


def layout_problems(program) -> list[str]:
    """Each delegate tensor the ``.pte`` hands over in another memory order than the one its
    partition was converted for (read from the graph kept beside the payload): the NPU would
    read it transposed. Programs whose payloads keep no graph are not checked."""
    from ..device.delegate_io import identity, same_memory_order
    from ..device.payload import find_host_graph, is_container, unpack_reference

    found = []
    for index, backend, data, inputs, outputs in delegate_calls(program):
        graph = data if is_container(data) else find_host_graph(program.named_data, data)
        if graph is None:
            continue
        try:
            _, meta = unpack_reference(graph)
        except InvalidProgramError:
            continue
        for kind, tensors in (("input", inputs), ("output", outputs)):
            for n, ((sizes, order, _), spec) in enumerate(zip(tensors, meta.get(kind + "s", []))):
                want = tuple(spec.get("dim_order") or identity(len(sizes)))
                if len(want) == len(order) and not same_memory_order(sizes, tuple(order), want):
                    found.append(f"delegate {index} ({backend}) {kind} {n}: the program hands "
                                 f"it in dim order {tuple(order)}, its partition was "
                                 f"converted for {want}")
    return found


def io_problems_of(program) -> list[str]:
    """Each delegate call of the ``.pte`` (to a known NPU family's runtime) whose tensors the
    device runtime would refuse or misread (element type, size and count;
    ``device.delegate_io.io_problems``), against the NPU tensors its payload declares
    (``NpuFamily.npu_tensors``: an Ethos-U payload's Vela records, else the partition graph
    kept beside a vendor payload). Calls whose tensors are not at hand are skipped."""
    from ..device.delegate_io import NpuTensor, io_problems
    from ..device.payload import find_host_graph, is_container, unpack_reference
    from ..npu.families import family_of_backend

    found = []
    for index, backend, data, inputs, outputs in delegate_calls(program):
        family = family_of_backend(backend)
        if family is None:
            continue
        graph = data if is_container(data) else find_host_graph(program.named_data, data)
        try:
            model = unpack_reference(bytes(graph))[0] if graph is not None else None
            npu = family.npu_tensors(data, model)
        except InvalidProgramError as exc:
            found.append(f"delegate {index} ({backend}): {exc}")
            continue
        if npu is None:  # the family reads the graph, which is not at hand
            continue
        tensors = [[(_dtype(t), sizes) for sizes, _, t in part] for part in (inputs, outputs)]
        found += [f"delegate {index} ({backend}): {p}" for p in io_problems(
            family, *tensors, [NpuTensor(*t) for t in npu["inputs"]],
            [NpuTensor(*t) for t in npu["outputs"]])]
    return found


def check_program(source, target_name: str, companion_file=None) -> list[str]:
    """One line per reason the ``.pte`` at ``source`` (path or bytes) would not run on
    ``target_name``'s board; empty when none is found. Its companion (``companion_file``, or
    the one beside a path when there is one) adds the partitions' graphs (layouts) and the
    report's placements."""
    from ..device.pte_file import read_bytes
    from ..npu.families import family
    from .kernels_list import kernel_list, problems as kernel_problems
    from ..report import Report
    from ..targets import get_target
    from . import companion

    target = get_target(target_name)
    data = read_bytes(source)
    pair, _ = companion.resolve(source, data, companion_file)
    program = read_program(data, pair.host_data if pair is not None else None)
    device_id = family(target.npu.kind).backend_id
    found = []
    for index, backend, data, inputs, outputs in delegate_calls(program):
        where = f"delegate {index} ({backend})"
        if backend != device_id:
            found.append(f"{where}: target {target.name} runs {device_id} delegates, not "
                         f"{backend}")
            continue
        found += [f"{where}: {p}" for p in payload_problems(target, data, inputs, outputs)]
    found += layout_problems(program)
    found += io_problems_of(program)
    report = pair.report if pair is not None else None
    raw = program.named_data.get(companion.REPORT_KEY)  # a program of an earlier mcu-npu
    if report is None and raw is not None:
        report = Report.from_json(raw)
    placements = report.ops if report is not None else ()
    uses = [u for u in kernel_list(program.data, target) if u.library != "delegate"]
    found += kernel_problems(uses, target, placements)
    return found
