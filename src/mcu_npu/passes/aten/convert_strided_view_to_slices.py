"""ConvertStridedViewToSlices: an ``as_strided`` that keeps its input's strides, a window of a
contiguous tensor, becomes slices before quantization.

Before::

    y = as_strided(x, (N, C, T - p), x.stride())        # a causal conv's chomp
    y = as_strided(x, (N, C, T - p), x.stride(), p)      # ... of the last T - p frames

After::

    y = slice(x, 2, 0, T - p)
    y = slice(x, 2, p, T)

The storage offset splits into one start per axis (the input contiguous, each window within
its axis). Every NPU slices; no NPU compiler takes an arbitrary strided view. Exact.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, replace_nodes
from ...graph.schema import bind

aten = torch.ops.aten
_AS_STRIDED = (aten.as_strided.default, aten.as_strided_copy.default)


def _starts(node: Node) -> list[int] | None:
    """Per axis, where the window starts; None unless ``node`` is such an as_strided."""
    if node.op != "call_function" or node.target not in _AS_STRIDED:
        return None
    x = node.args[0]
    val = x.meta.get("val") if isinstance(x, Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    size, stride = list(node.args[1]), list(node.args[2])
    offset = bind(node).storage_offset or 0
    shape = [int(d) for d in val.shape]
    contiguous = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        contiguous[d] = contiguous[d + 1] * shape[d + 1]
    if len(size) != len(shape) or [int(s) for s in stride] != contiguous or \
            not all(isinstance(v, int) for v in (*size, offset)):
        return None
    starts = []
    for d in range(len(shape)):
        start, offset = divmod(offset, contiguous[d])
        if start + size[d] > shape[d]:
            return None
        starts.append(start)
    return starts if offset == 0 else None


def _as_slices(gm: GraphModule, node: Node) -> Node:
    emit = Emitter(gm.graph, node)
    x = node.args[0]
    shape = [int(d) for d in x.meta["val"].shape]
    for d, (start, size) in enumerate(zip(_starts(node), node.args[1])):
        if start != 0 or size != shape[d]:
            x = emit(aten.slice.Tensor, x, d, start, start + size)
    return x if x is not node.args[0] else emit(aten.clone.default, x)


class ConvertStridedViewToSlices(PassBase):
    """Rewrite every window ``as_strided`` into slices."""

    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module, replace_nodes(
            graph_module, lambda n: _starts(n) is not None, _as_slices))
