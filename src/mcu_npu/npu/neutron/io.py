"""How ``NeutronBackend.cpp`` hands delegate tensors to the NPU: the bytes as they are, or
transposed element by element where the payload's format flag says so
(``device.delegate_io.neutron_layout``); it converts no element type, so each tensor's
element size and count must be the NPU tensor's."""

from __future__ import annotations

from ...device.delegate_io import graph_tensors


def _problem(kind: str, i: int, dtype, numel: int, npu) -> str | None:
    size = dtype.itemsize
    if (size, numel) != (npu.elem_size, npu.count):
        return (f"Neutron {kind} {i} is {numel} x {dtype} ({size} bytes each) for an NPU "
                f"tensor of {npu.count} x {npu.elem_size}-byte elements: the runtime "
                "converts nothing, the NPU would read other bytes")
    return None


def input_problem(i: int, dtype, numel: int, npu) -> str | None:
    """Why a ``dtype`` tensor of ``numel`` elements cannot be Neutron input ``i``
    (``npu``: its ``NpuTensor``)."""
    return _problem("input", i, dtype, numel, npu)


def output_problem(i: int, dtype, numel: int, npu) -> str | None:
    """Why a ``dtype`` tensor of ``numel`` elements cannot take Neutron output ``i``."""
    return _problem("output", i, dtype, numel, npu)


def npu_tensors(payload: bytes, graph) -> dict[str, list[tuple[int, int]]] | None:
    """The NPU inputs and outputs: the partition graph's (kept beside the payload), which the
    converter keeps as they are; None without the graph."""
    return None if graph is None else graph_tensors(graph)
