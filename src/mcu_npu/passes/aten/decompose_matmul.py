"""DecomposeMatmul: a matmul of two batched activations as one ``bmm``, before quantization.

Before::

    y = matmul(a, b)                   # a [..., M, K], b [..., K, N], the same batch dims

After::

    y = view(bmm(reshape(a, [B, M, K]), reshape(b, [B, K, N])), [..., M, N])   # B: batch size

Core-ATen decomposition does the same after quantization, through ``expand`` and ``view``
copies that sit between one quantize / dequantize pair: data movement with float on one side,
which cannot run in int8. Done here, the reshapes share their input's quantization
parameters and the ``bmm`` (TFLite BATCH_MATMUL) gets its own, as hand-written attention
(``q @ k.transpose(-2, -1)``) needs. Operands whose batch dims broadcast, and products with a
rank-1 or rank-2 operand (``linear``-like), are left to torch.
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, is_call, replace_nodes, static_shape

aten = torch.ops.aten
MATMUL = aten.matmul.default


def _batched(node: Node) -> bool:
    """A matmul of two operands of rank 3 or more with equal, static batch dims."""
    if not is_call(node, MATMUL) or not all(isinstance(a, Node) for a in node.args[:2]):
        return False
    try:
        a, b = (static_shape(n) for n in node.args[:2])
    except Exception:  # no shape metadata or a dynamic shape: left to torch
        return False
    return len(a) == len(b) >= 3 and a[:-2] == b[:-2]


def _decompose(gm: GraphModule, node: Node) -> Node:
    a, b = node.args[:2]
    sa, sb = static_shape(a), static_shape(b)
    emit = Emitter(gm.graph, node)
    if len(sa) == 3:
        return emit(aten.bmm.default, a, b)
    batch = math.prod(sa[:-2])
    a3 = emit(aten.reshape.default, a, [batch, *sa[-2:]])
    b3 = emit(aten.reshape.default, b, [batch, *sb[-2:]])
    return emit(aten.view.default, emit(aten.bmm.default, a3, b3), [*sa[:-1], sb[-1]])


class DecomposeMatmul(PassBase):
    """Rewrite every batched ``matmul`` of equal batch dims into ``bmm`` on 3-D reshapes."""

    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module, replace_nodes(graph_module, _batched, _decompose))
