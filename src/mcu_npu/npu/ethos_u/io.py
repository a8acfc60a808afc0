"""How ``EthosUBackend.cpp`` hands delegate tensors to the NPU: every input a plain memcpy of
the tensor's bytes into its Vela record's place in the scratch area, every output a memcpy
back; nothing is transposed or converted (``device.delegate_io``)."""

from __future__ import annotations

import math

from ...device.delegate_io import graph_tensors
from ...device.payload import is_container
from . import payload as bin_stream

# EthosUBackend.cpp copies Int (4 bytes), Char / Byte / Bool (1) and Short (2) tensors into
# an NPU input whose element size matches; any other type, float included, is InvalidProgram.
# Keyed by the dtype's name: a torch dtype or a ``device.pte_file.ScalarType`` (no torch).
ELEMENT_SIZES = {"torch.int32": 4, "torch.int8": 1, "torch.uint8": 1, "torch.int16": 2,
                 "torch.bool": 1}


def input_problem(i: int, dtype, numel: int, npu) -> str | None:
    """Why ``EthosUBackend.cpp`` refuses a ``dtype`` tensor of ``numel`` elements as NPU
    input ``i`` (``npu``: its ``NpuTensor``; None: it copies it)."""
    if ELEMENT_SIZES.get(str(dtype)) != npu.elem_size:
        return (f"Ethos-U input {i} is {dtype} for a {npu.elem_size}-byte NPU input: the "
                "runtime copies only int32 (4 bytes), int8/uint8/bool (1 byte) and int16 "
                "(2 bytes) tensors whose size matches, and refuses this program")
    if numel != npu.count:
        return (f"Ethos-U input {i}: the program passes {numel} elements, the NPU expects "
                f"{npu.count} (Input tensor sizes do not match)")
    return None


def output_problem(i: int, dtype, numel: int, npu) -> str | None:
    """Why an Ethos-U output tensor of ``numel`` ``dtype`` elements cannot take NPU output
    ``i`` as it is."""
    nbytes = numel * dtype.itemsize
    if nbytes != npu.count * npu.elem_size:
        return (f"Ethos-U output {i}: the program's tensor is {nbytes} bytes, the NPU writes "
                f"{npu.count * npu.elem_size}; the runtime would re-chunk the data "
                "(copy_with_layout_adjustment), which this program does not call for")
    return None


def npu_tensors(payload: bytes, graph) -> dict[str, list[tuple[int, int]]]:
    """The NPU inputs and outputs as the runtime reads them: the Vela records of a bin
    stream, a reference payload's graph tensors (``graph``)."""
    if is_container(payload):
        return graph_tensors(graph)
    stream = bin_stream.parse(payload)
    return {"inputs": [(math.prod(io.shape), io.elem_size) for io in stream.inputs],
            "outputs": [(math.prod(io.shape), io.elem_size) for io in stream.outputs]}
