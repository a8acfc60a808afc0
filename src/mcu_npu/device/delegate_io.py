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

Neither runtime converts element types: Ethos-U refuses a tensor whose type is not one it
copies or whose element size differs from Vela's record, and Neutron hands the bytes on as
they are. ``io_problems`` says where a delegate call breaks these rules; the host runtime's
emulators refuse a call by it, and the compiler checks every partition by it before the
program is written (``flow.lower``), so a program the device refuses never comes out.
"""

from __future__ import annotations

from enum import IntEnum

import math
from typing import NamedTuple

import numpy as np

from ..errors import InvalidProgramError
from ..targets import NpuKind

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


def ethos_u_layout(dim_order) -> Perm:
    """The Ethos-U runtime copies bytes as they lie: the NPU sees the tensor's memory order."""
    return tuple(dim_order)


def same_memory_order(shape, a: Perm, b: Perm) -> bool:
    """True when layouts ``a`` and ``b`` differ only in where size-1 axes sit."""
    return [d for d in a if shape[d] != 1] == [d for d in b if shape[d] != 1]


def boundary_layouts(kind: NpuKind, sizes, dim_order) -> list[tuple[Perm, int]]:
    """Every (layout, Neutron flag) the device runtime can hand the NPU for a tensor of
    ``sizes`` and ``dim_order``, the plain copy first. Ethos-U has one: its memory order."""
    if kind is NpuKind.ETHOS_U:
        return [(ethos_u_layout(dim_order), NeutronFormat.FORMATLESS)]
    if kind is not NpuKind.NEUTRON:
        raise ValueError(f"no delegate I/O rules for NPU kind {kind!r}")
    found = []
    for flag in NeutronFormat:
        try:
            found.append((neutron_layout(sizes, dim_order, flag), flag))
        except InvalidProgramError:
            continue
    return found


def choose_layout(kind: NpuKind, sizes, dim_order, preferred: Perm, what: str) -> Perm:
    """The boundary layout for a partition input or output: the one the graph prefers when
    the runtime can deliver it, else the runtime's plain copy (the graph then transposes)."""
    options = boundary_layouts(kind, sizes, dim_order)
    if not options:
        raise InvalidProgramError(
            f"{what}: the {kind} runtime accepts no layout for a tensor of sizes "
            f"{tuple(sizes)} with dim order {tuple(dim_order)}; make the model input "
            "contiguous (or channels last with more than one channel)")
    for perm, _ in options:
        if same_memory_order(sizes, perm, preferred):
            return perm
    return options[0][0]


def neutron_flag(sizes, dim_order, perm: Perm, what: str) -> NeutronFormat:
    """The format flag under which the Neutron runtime hands the NPU layout ``perm``."""
    for layout_, flag in boundary_layouts(NpuKind.NEUTRON, sizes, dim_order):
        if same_memory_order(sizes, layout_, perm):
            return flag
    raise InvalidProgramError(f"{what}: no Neutron format flag delivers layout {tuple(perm)} "
                              f"for sizes {tuple(sizes)} and dim order {tuple(dim_order)}")


def to_npu(memory: np.ndarray, sizes, src: Perm, dst: Perm) -> np.ndarray:
    """Reorder a tensor's flat ``memory`` (laid out as ``src``) into layout ``dst``, flat."""
    physical = memory.reshape([int(sizes[d]) for d in src])
    return np.ascontiguousarray(physical.transpose([src.index(d) for d in dst])).reshape(-1)


# EthosUBackend.cpp copies Int (4 bytes), Char / Byte / Bool (1) and Short (2) tensors into
# an NPU input whose element size matches; any other type, float included, is InvalidProgram.
# Keyed by the dtype's name: a torch dtype or a ``device.pte_file.ScalarType`` (no torch).
ETHOS_U_ELEMENT_SIZES = {"torch.int32": 4, "torch.int8": 1, "torch.uint8": 1, "torch.int16": 2,
                         "torch.bool": 1}


class NpuTensor(NamedTuple):
    """One NPU input or output as the device runtime sees it: element count and size."""

    count: int
    elem_size: int


def ethos_u_input_problem(i: int, dtype, numel: int,
                          npu: NpuTensor) -> str | None:
    """Why ``EthosUBackend.cpp`` refuses a ``dtype`` tensor of ``numel`` elements as NPU
    input ``i`` (None: it copies it)."""
    if ETHOS_U_ELEMENT_SIZES.get(str(dtype)) != npu.elem_size:
        return (f"Ethos-U input {i} is {dtype} for a {npu.elem_size}-byte NPU input: the "
                "runtime copies only int32 (4 bytes), int8/uint8/bool (1 byte) and int16 "
                "(2 bytes) tensors whose size matches, and refuses this program")
    if numel != npu.count:
        return (f"Ethos-U input {i}: the program passes {numel} elements, the NPU expects "
                f"{npu.count} (Input tensor sizes do not match)")
    return None


def ethos_u_output_problem(i: int, nbytes: int, npu: NpuTensor) -> str | None:
    """Why an Ethos-U output tensor of ``nbytes`` cannot take NPU output ``i`` as it is."""
    if nbytes != npu.count * npu.elem_size:
        return (f"Ethos-U output {i}: the program's tensor is {nbytes} bytes, the NPU writes "
                f"{npu.count * npu.elem_size}; the runtime would re-chunk the data "
                "(copy_with_layout_adjustment), which this program does not call for")
    return None


def neutron_problem(kind: str, i: int, dtype, numel: int,
                    npu: NpuTensor) -> str | None:
    """Why a ``dtype`` tensor of ``numel`` elements cannot be Neutron ``kind`` ``i``:
    ``NeutronBackend.cpp`` hands the NPU the tensor's bytes (or transposes them element by
    element), so the element size and count must be the NPU tensor's."""
    size = dtype.itemsize
    if (size, numel) != (npu.elem_size, npu.count):
        return (f"Neutron {kind} {i} is {numel} x {dtype} ({size} bytes each) for an NPU "
                f"tensor of {npu.count} x {npu.elem_size}-byte elements: the runtime "
                "converts nothing, the NPU would read other bytes")
    return None


def io_problems(kind: NpuKind, inputs, outputs, npu_inputs: "list[NpuTensor]",
                npu_outputs: "list[NpuTensor]") -> list[str]:
    """Where ``kind``'s device runtime refuses (or misreads) a delegate call passing
    ``inputs`` and ``outputs`` (each a (dtype, sizes) pair) to NPU tensors ``npu_inputs``
    and ``npu_outputs``: element types and sizes, as ``EthosUBackend.cpp`` and
    ``NeutronBackend.cpp`` handle them."""
    if (len(inputs), len(outputs)) != (len(npu_inputs), len(npu_outputs)):
        return [f"the NPU takes {len(npu_inputs)} inputs and {len(npu_outputs)} outputs, the "
                f"call passes {len(inputs)} and {len(outputs)}"]
    found = []
    for i, ((dtype, sizes), npu) in enumerate(zip(inputs, npu_inputs)):
        numel = math.prod(int(d) for d in sizes)
        found.append(ethos_u_input_problem(i, dtype, numel, npu) if kind is NpuKind.ETHOS_U
                     else neutron_problem("input", i, dtype, numel, npu))
    for i, ((dtype, sizes), npu) in enumerate(zip(outputs, npu_outputs)):
        numel = math.prod(int(d) for d in sizes)
        if kind is NpuKind.ETHOS_U:
            nbytes = numel * dtype.itemsize
            found.append(ethos_u_output_problem(i, nbytes, npu))
        else:
            found.append(neutron_problem("output", i, dtype, numel, npu))
    return [p for p in found if p is not None]
