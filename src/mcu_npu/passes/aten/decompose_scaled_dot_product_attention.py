"""DecomposeScaledDotProductAttention: unmasked attention as batch matmuls and a softmax.

Before::

    out = scaled_dot_product_attention(q, k, v)        # q [..., L, E], k [..., S, E], v [..., S, Ev]

After::

    q3, k3, v3 = reshape(q, [N, L, E]), reshape(k, [N, S, E]), reshape(v, [N, S, Ev])
    scores = mul(bmm(q3, transpose(k3, 1, 2)), scale)      # scale: given, or 1/sqrt(E)
    out = view(bmm(softmax(scores, -1), v3), [..., L, Ev])  # N: product of the batch dims

(``DecomposeReshape``, later in the pipeline, makes the reshapes views and copies.)

Left whole, the op reaches the quantizer as one unannotated node and core-ATen decomposition
breaks it up only after quantization, so none of its pieces can run in int8. Decomposed here,
each piece gets its quantization rule (the scale is one scalar multiply, the products are
BATCH_MATMULs, softmax takes its fixed int8 output range).

Only attention without a mask, dropout, causal flag or grouped heads is rewritten. Core
ATen would turn the softmax into ``_safe_softmax``, which returns 0 instead of NaN for a row
that is entirely -inf; such a row only arises from a mask (unmasked scores are finite), so
the plain softmax is exact here. It is also all int8 kernels can do: int8 scores are never
-inf, so the guard would never apply after quantization. Masked attention is left whole (to
the CPU): its -inf entries have no int8 value, so it needs a finite mask first.
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.graph.schema import bind
from mcu_npu.passes.aten._recurrent import Emitter, is_call, replace_nodes, static_shape

aten = torch.ops.aten
SDPA = aten.scaled_dot_product_attention.default


def _plain(node: Node) -> bool:
    """An SDPA call with no mask, no dropout, not causal, without grouped heads, on static
    shapes of rank 3 or more whose batch dims agree."""
    if not is_call(node, SDPA):
        return False
    a = bind(node)
    if a.attn_mask is not None or a.dropout_p != 0.0 or a.is_causal or \
            getattr(a, "enable_gqa", False):
        return False
    try:
        shapes = [static_shape(n) for n in (a.query, a.key, a.value)]
    except Exception:  # no shape metadata or a dynamic shape: left to torch
        return False
    q, k, v = shapes
    return len(q) >= 3 and len(k) == len(v) == len(q) and q[:-2] == k[:-2] == v[:-2] and \
        q[-1] == k[-1] and k[-2] == v[-2]


def _decompose(gm: GraphModule, node: Node) -> Node:
    a = bind(node)
    q, k, v = (static_shape(n) for n in (a.query, a.key, a.value))
    batch = math.prod(q[:-2])
    scale = a.scale if a.scale is not None else 1.0 / math.sqrt(q[-1])
    emit = Emitter(gm.graph, node)
    q3 = emit(aten.reshape.default, a.query, [batch, q[-2], q[-1]])  # permuted heads: a copy
    k3 = emit(aten.reshape.default, a.key, [batch, k[-2], k[-1]])
    v3 = emit(aten.reshape.default, a.value, [batch, v[-2], v[-1]])
    scores = emit(aten.bmm.default, q3, emit(aten.transpose.int, k3, 1, 2))
    scores = emit(aten.mul.Tensor, scores, float(scale))
    weights = emit(aten.softmax.int, scores, -1)
    out = emit(aten.bmm.default, weights, v3)
    return emit(aten.view.default, out, [*q[:-1], v[-1]])


class DecomposeScaledDotProductAttention(PassBase):
    """Rewrite every unmasked ``scaled_dot_product_attention`` into bmm / mul / softmax."""

    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module, replace_nodes(graph_module, _plain, _decompose))
