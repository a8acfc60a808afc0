"""The device runtimes' rules for delegate inputs and outputs, applied to every delegate call
of a lowered program before it is written.

A partition's NPU tensors (element count and size) are recorded when it is compiled
(``NpuFamily.npu_tensors``, into the lowered module's info); after delegation each call's
arguments are checked against them with ``device.delegate_io.io_problems``, the function by
which the host runtime refuses a call. ``flow.lower`` moves a partition found here to the CPU, so a
program the device would refuse is never serialized.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..device.delegate_io import NpuTensor, io_problems
from ..graph.delegate_call import is_delegate_call
from ..npu.families import family

if TYPE_CHECKING:
    from executorch.exir.lowered_backend_module import LoweredBackendModule

NPU_IO = "npu_io"
"""The key of the NPU tensors in a lowered module's delegate info."""


def _tensors(value) -> list[tuple[object, tuple[int, ...]]]:
    values = value if isinstance(value, (list, tuple)) else [value]
    return [(v.dtype, tuple(v.shape)) for v in values]


def refused_calls(exported_program, kind) -> list[tuple[LoweredBackendModule, list[str]]]:
    """Each delegate call of ``exported_program`` (lowered, its partitions' graphs still
    held) that ``kind``'s device runtime would refuse or misread, with the reasons."""
    import torch

    gm = exported_program.graph_module
    found = []
    for node in gm.graph.nodes:
        if not is_delegate_call(node):
            continue
        lowered = getattr(gm, node.args[0].target)
        recorded = (lowered.meta.get("_delegate_info_meta") or {}).get(NPU_IO)
        if recorded is None:
            continue  # not one of this project's partitions
        inputs = [(a.meta["val"].dtype, tuple(a.meta["val"].shape)) for a in node.args[1:]
                  if isinstance(a, torch.fx.Node)]
        problems = io_problems(family(kind), inputs, _tensors(node.meta["val"]),
                               [NpuTensor(*t) for t in recorded["inputs"]],
                               [NpuTensor(*t) for t in recorded["outputs"]])
        if problems:
            found.append((lowered, problems))
    return found
