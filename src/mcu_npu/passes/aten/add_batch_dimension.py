"""AddBatchDimension: a convolution or pooling on an input without batch dimension runs on a
batch of one.

Before::

    y = conv1d(x, w, b)                        # x: (C, L), PyTorch's unbatched form

After::

    y = squeeze(conv1d(unsqueeze(x, 0), w, b), 0)

PyTorch accepts convolutions and pooling on unbatched inputs (``(C, L)`` for 1-D, ``(C, H, W)``
for 2-D); the NPU converters and the Cortex-M kernels take the batched form only (the
Cortex-M lowering refuses, or mis-lowers, the unbatched one). The rewrite is exact.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, replace_nodes

aten = torch.ops.aten

BATCHED_RANK = {
    aten.conv1d.default: 3, aten.conv2d.default: 4,
    aten.conv_transpose1d.default: 3, aten.conv_transpose2d.input: 4,
    aten.max_pool1d.default: 3, aten.avg_pool1d.default: 3,
    aten.max_pool2d.default: 4, aten.avg_pool2d.default: 4,
    aten.adaptive_avg_pool1d.default: 3, aten.adaptive_avg_pool2d.default: 4,
    aten.adaptive_max_pool2d.default: 4,
}
"""Op -> the rank of its batched input; an input one rank lower is unbatched."""


def _rank(node) -> int | None:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return val.dim() if isinstance(val, torch.Tensor) else None


class AddBatchDimension(PassBase):
    """Give every unbatched convolution or pooling (single output) a batch of one."""

    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module, replace_nodes(graph_module, _unbatched, _batched))


def _unbatched(node: Node) -> bool:
    return node.op == "call_function" and node.target in BATCHED_RANK and bool(node.args) \
        and _rank(node.args[0]) == BATCHED_RANK[node.target] - 1 \
        and isinstance(node.meta.get("val"), torch.Tensor)


def _batched(graph_module: GraphModule, node: Node) -> Node:
    emit = Emitter(graph_module.graph, node)
    out = emit(node.target, emit(aten.unsqueeze.default, node.args[0], 0), *node.args[1:])
    if node.kwargs:
        out.kwargs = dict(node.kwargs)
    return emit(aten.squeeze.dims, out, [0])
