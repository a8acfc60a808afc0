"""ConvertUpsample1dTo2d: a 1-D nearest or linear upsampling becomes the 2-D one over a
height of 1 before quantization.

Before::

    y = upsample_nearest1d(x, size, scales)                  # x: (N, C, L), a 1-D U-Net
    z = upsample_linear1d(x, size, align_corners, scales)

After::

    y = squeeze(upsample_nearest2d(unsqueeze(x, 2), [1, *size], [1.0, *scales]), 2)
    z = squeeze(upsample_bilinear2d(unsqueeze(x, 2), [1, *size], align_corners,
                                    [1.0, *scales]), 2)

Core-ATen decomposition would turn the 1-D forms into index and arithmetic ops after
quantization, left unquantized on the CPU; the 2-D forms are resizes every NPU runs (the
unit height costs nothing). Exact in float.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, replace_nodes

aten = torch.ops.aten

_TWO_D = {aten.upsample_nearest1d.vec: aten.upsample_nearest2d.vec,
          aten.upsample_linear1d.vec: aten.upsample_bilinear2d.vec}


def _upsample1d(node: Node) -> bool:
    return node.op == "call_function" and node.target in _TWO_D and not node.kwargs


def _as_2d(graph_module: GraphModule, node: Node) -> Node:
    emit = Emitter(graph_module.graph, node)
    x, size, *rest = node.args
    scales = rest[-1]
    size = None if size is None else [1, *size]
    scales = None if scales is None else [1.0, *scales]
    middle = rest[:-1]  # align_corners of the linear form
    y = emit(_TWO_D[node.target], emit(aten.unsqueeze.default, x, 2), size, *middle, scales)
    return emit(aten.squeeze.dim, y, 2)


class ConvertUpsample1dTo2d(PassBase):
    """Rewrite every 1-D nearest / linear upsampling into its 2-D form of height 1."""

    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module, replace_nodes(graph_module, _upsample1d, _as_2d))
