"""How the device runtimes hand a delegate's tensors to the NPU and take its results back.

The compiler picks each partition boundary's layout from these rules and the host runtime's
emulators copy data by them, so both follow the device code, not a convenience of the host:

- Ethos-U (``EthosUBackend.cpp``): every input is a plain memcpy of the tensor's bytes into
  the NPU input region, every output a memcpy back; nothing is transposed, whatever the
  tensor's dim order. The NPU therefore sees the tensor in its memory order.
- Neutron (``NeutronBackend.cpp``): each NPU input and output has a format flag. With the
  flag set and the channel dimension ``sizes[rank-3]`` not 1, a contiguous tensor is
  transposed on the CPU from ``(..., C, H, W)`` to ``(..., H, W, C)`` (and back for outputs),
  a channels-last tensor is used as it is, any other dim order is refused, and a rank below 3
  is refused. Otherwise the tensor must be contiguous and is used as it is.

A layout is a permutation ``perm``: the NPU tensor is ``torch_tensor.permute(perm)``, so its
memory order is ``perm`` itself.

Which of the two a runtime does is a capability of its NPU (``NpuSpec.runtime_transposes_io``).
Neither runtime converts element types: Ethos-U refuses a tensor whose type is not one it
copies or whose element size differs from Vela's record, and Neutron hands the bytes on as
they are; each NPU family states its rules (``npu.family.NpuFamily.input_problem``,
``output_problem``). ``io_problems`` says where a delegate call breaks them; the host
runtime's emulators refuse a call by them, and the compiler checks every partition by them
before the program is written (``flow.lower``), so a program the device refuses never comes
out.
"""

from __future__ import annotations

from enum import IntEnum

import math
from typing import NamedTuple

import numpy as np

from ..errors import InvalidProgramError

Perm = tuple[int, ...]


class NeutronFormat(IntEnum):
    """The per-tensor flag of a Neutron payload header."""

    FORMATLESS = 0
    CHANNELS_LAST = 1


def identity(rank: int) -> Perm:
    return tuple(range(rank))


def inverse(perm: Perm) -> Perm:
    """The layout undoing ``perm``: ``x.permute(perm).permute(inverse(perm))`` is ``x``."""
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def is_contiguous(dim_order) -> bool:
    """``is_contiguous_dim_order`` of ExecuTorch's dim_order_util.h."""
    return tuple(dim_order) == identity(len(dim_order))


def is_channels_last(dim_order) -> bool:
    """``is_channels_last_dim_order`` of dim_order_util.h: 4-D (0,2,3,1) or 5-D (0,2,3,4,1)."""
    rank = len(dim_order)
    return rank in (4, 5) and tuple(dim_order) == (0, *range(2, rank), 1)


def neutron_transposes(sizes, flag: int) -> bool:
    """Whether the Neutron runtime takes the transposing branch for a tensor: the flag is set
    and ``multipleChannelsPresent`` (rank below 3, or ``sizes[rank-3] != 1``)."""
    rank = len(sizes)
    return bool(flag) and (rank < 3 or int(sizes[rank - 3]) != 1)


def channels_last_of_last3(rank: int) -> Perm:
    """The order ``transposeInput`` writes: leading dims, then H, W, C of the last three."""
    return (*range(rank - 3), rank - 2, rank - 1, rank - 3)


def neutron_layout(sizes, dim_order, flag: int, what: str = "tensor") -> Perm:
    """The memory order in which the Neutron runtime hands a delegate tensor to the NPU (or
    takes it back); InvalidProgramError where the runtime returns ``InvalidProgram``."""
    rank, dim_order = len(sizes), tuple(dim_order)
    if neutron_transposes(sizes, flag):
        if rank < 3:
            raise InvalidProgramError(f"{what}: the Neutron runtime cannot transpose a {rank}-D "
                                      "tensor to channels last (format flag set, rank below 3)")
        if is_channels_last(dim_order):
            return dim_order
        if is_contiguous(dim_order):
            return channels_last_of_last3(rank)
        raise InvalidProgramError(f"{what}: the Neutron runtime refuses dim order {dim_order} "
                                  "(format flag set: contiguous or channels last only)")
    if not is_contiguous(dim_order):
        raise InvalidProgramError(f"{what}: the Neutron runtime expects a contiguous dim order "
                                  f"here, the tensor has {dim_order}")
    return identity(rank)


def same_memory_order(shape, a: Perm, b: Perm) -> bool:
    """True when layouts ``a`` and ``b`` differ only in where size-1 axes sit."""
    return [d for d in a if shape[d] != 1] == [d for d in b if shape[d] != 1]


def boundary_layouts(transposes: bool, sizes, dim_order) -> list[tuple[Perm, int]]:
    """Every (layout, Neutron flag) the device runtime can hand the NPU for a tensor of
    ``sizes`` and ``dim_order``, the plain copy first: a runtime that copies bytes as they
    lie has one, the tensor's memory order; one that ``transposes`` flagged tensors
    (Neutron's) has one per flag it accepts."""
    if not transposes:
        return [(tuple(dim_order), NeutronFormat.FORMATLESS)]
    found = []
    for flag in NeutronFormat:
        try:
            found.append((neutron_layout(sizes, dim_order, flag), flag))
        except InvalidProgramError:
            continue
    return found


def choose_layout(npu, sizes, dim_order, preferred: Perm, what: str) -> Perm:
    """The boundary layout for a partition input or output on ``npu`` (an ``NpuSpec``): the
    one the graph prefers when the runtime can deliver it, else the runtime's plain copy (the
    graph then transposes)."""
    options = boundary_layouts(npu.runtime_transposes_io, sizes, dim_order)
    if not options:
        raise InvalidProgramError(
            f"{what}: the {npu.kind} runtime accepts no layout for a tensor of sizes "
            f"{tuple(sizes)} with dim order {tuple(dim_order)}; make the model input "
            "contiguous (or channels last with more than one channel)")
    for perm, _ in options:
        if same_memory_order(sizes, perm, preferred):
            return perm
    return options[0][0]


def neutron_flag(sizes, dim_order, perm: Perm, what: str) -> NeutronFormat:
    """The format flag under which the Neutron runtime hands the NPU layout ``perm``."""
    for layout_, flag in boundary_layouts(True, sizes, dim_order):
        if same_memory_order(sizes, layout_, perm):
            return flag
    raise InvalidProgramError(f"{what}: no Neutron format flag delivers layout {tuple(perm)} "
                              f"for sizes {tuple(sizes)} and dim order {tuple(dim_order)}")


def to_npu(memory: np.ndarray, sizes, src: Perm, dst: Perm) -> np.ndarray:
    """Reorder a tensor's flat ``memory`` (laid out as ``src``) into layout ``dst``, flat."""
    physical = memory.reshape([int(sizes[d]) for d in src])
    return np.ascontiguousarray(physical.transpose([src.index(d) for d in dst])).reshape(-1)


class NpuTensor(NamedTuple):
    """One NPU input or output as the device runtime sees it: element count and size."""

    count: int
    elem_size: int


def graph_tensors(graph) -> dict[str, list[tuple[int, int]]]:
    """(element count, element size) of a partition graph's (``TFLiteModel``'s) inputs and
    outputs, as a runtime that hands them over unchanged sees them."""
    return {kind: [(math.prod(spec.shape), np.dtype(spec.dtype).itemsize) for spec in specs]
            for kind, specs in (("inputs", graph.inputs), ("outputs", graph.outputs))}


def io_problems(family, inputs, outputs, npu_inputs: "list[NpuTensor]",
                npu_outputs: "list[NpuTensor]") -> list[str]:
    """Where ``family``'s device runtime (an ``npu.family.NpuFamily``) refuses or misreads a
    delegate call passing ``inputs`` and ``outputs`` (each a (dtype, sizes) pair) to NPU
    tensors ``npu_inputs`` and ``npu_outputs``: element types and sizes, by the family's
    ``input_problem`` and ``output_problem``."""
    if (len(inputs), len(outputs)) != (len(npu_inputs), len(npu_outputs)):
        return [f"the NPU takes {len(npu_inputs)} inputs and {len(npu_outputs)} outputs, the "
                f"call passes {len(inputs)} and {len(outputs)}"]
    found = []
    for rule, tensors, npu_tensors in ((family.input_problem, inputs, npu_inputs),
                                       (family.output_problem, outputs, npu_outputs)):
        for i, ((dtype, sizes), npu) in enumerate(zip(tensors, npu_tensors)):
            found.append(rule(i, dtype, math.prod(int(d) for d in sizes), npu))
    return [p for p in found if p is not None]
