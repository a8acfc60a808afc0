"""ConvertResizeToLinear: a resize of a small map that the target's NPU cannot resize becomes a
linear layer over the map's positions, which every NPU runs.

Before::

    y = upsample_bilinear2d(x, size, align_corners)     # or nearest; x: (N, C, H, W)

After (``M``: the (OH * OW, H * W) matrix of the resize, the same op applied to the unit
images of H x W, stored as a constant)::

    y = view(linear(view(x, (N, C, H * W)), M), (N, C, OH, OW))

Bilinear and nearest resizing are linear in the input, so the rewrite is exact in float,
for any sizes, scale factors and align_corners. NPUs resize only by 1, 2, 4 or 8 (Vela: 2
for half-pixel bilinear); MobileViT resizes a 3 x 3 map to 4 x 4 and back, which would
otherwise run in float on the CPU. The weights are quantized per output position like any
linear layer's. Only maps with at most ``MAX_WEIGHTS`` matrix elements are rewritten: the
matrix grows with the square of the map.
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, constant_attr, finish, static_shape

aten = torch.ops.aten

MAX_WEIGHTS = 64 * 64
"""Largest resize matrix (output positions x input positions) the pass writes."""


class ConvertResizeToLinear(PassBase):
    """Replace every 4-D float resize over static shapes that ``target``'s NPU does not take
    (the resize converter's checks refuse it) and whose matrix has at most ``MAX_WEIGHTS``
    elements."""

    def __init__(self, target=None):
        super().__init__()
        self.target = target

    def _selected(self, node: Node) -> bool:
        from mcu_npu.tflite.ops.resize import ATEN_RESIZES, npu_resizes

        if node.op != "call_function" or node.target not in ATEN_RESIZES:
            return False
        try:
            shape, out = static_shape(node.args[0]), static_shape(node)
        except Exception:
            return False
        if len(shape) != 4 or not node.args[0].meta["val"].dtype.is_floating_point:
            return False
        if math.prod(shape[2:]) * math.prod(out[2:]) > MAX_WEIGHTS:
            return False
        return not npu_resizes(node, self.target)

    def call(self, graph_module: GraphModule) -> PassResult:
        work = [n for n in graph_module.graph.nodes if self._selected(n)]
        for node in work:
            node.replace_all_uses_with(_linear(graph_module, node))
            graph_module.graph.erase_node(node)
        if work:
            finish(graph_module)
        return PassResult(graph_module, bool(work))


def _matrix(node: Node) -> torch.Tensor:
    """The (OH * OW, H * W) matrix of resize ``node``: the op applied to each unit image."""
    n, c, h, w = static_shape(node.args[0])
    basis = torch.eye(h * w, dtype=node.args[0].meta["val"].dtype).reshape(h * w, 1, h, w)
    with torch.no_grad():
        images = node.target(basis, *node.args[1:], **node.kwargs)
    return images.reshape(h * w, -1).t().contiguous()


def _linear(gm: GraphModule, node: Node) -> Node:
    n, c, h, w = static_shape(node.args[0])
    out = static_shape(node)
    emit = Emitter(gm.graph, node)
    weight = constant_attr(gm, node, f"{node.name}_matrix", _matrix(node))
    flat = emit(aten.view.default, node.args[0], [n, c, h * w])
    return emit(aten.view.default, emit(aten.linear.default, flat, weight), list(out))
