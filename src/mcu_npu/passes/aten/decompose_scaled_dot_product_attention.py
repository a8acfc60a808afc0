"""DecomposeScaledDotProductAttention: attention as batch matmuls, a softmax and a mask add.

Before::

    out = scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=c, scale=s)
    # q [..., L, E], k [..., S, E], v [..., S, Ev]; m bool (True: attend) or float, or absent

After::

    q3, k3, v3 = reshape(q, [N, L, E]), reshape(k, [N, S, E]), reshape(v, [N, S, Ev])
    scores = mul(bmm(q3, transpose(k3, 1, 2)), scale)      # scale: given, or 1/sqrt(E)
    scores = add(scores, bias)                              # only with a mask or is_causal
    out = view(bmm(softmax(scores, -1), v3), [..., L, Ev])  # N: product of the batch dims

where ``bias`` is the float mask, or ``where(m, 0, MASKED)`` for a boolean one (``MASKED``:
``torch.finfo(float32).min``), or the same of ``tril(ones(L, S))`` for ``is_causal``, brought to
``[N or 1, L, S]``. (``DecomposeReshape``, later in the pipeline, makes the reshapes views and
copies; ``FoldConstants`` computes the bias once; ``SaturateAttentionMask`` makes it an add
the quantizer saturates.)

Left whole, the op reaches the quantizer as one unannotated node and core-ATen decomposition
breaks it up only after quantization, so none of its pieces can run in int8. Decomposed here,
each piece gets its quantization rule (the scale is one scalar multiply, the products are
BATCH_MATMULs, softmax takes its fixed int8 output range).

Rewritten: attention without dropout or grouped heads whose mask, if any, is computed from
constants alone (a buffer, a padding mask expanded to the heads, a causal flag). A mask read
from a model input is left whole (to the CPU): its very negative entries would set the scale of
the int8 add. Core ATen would turn the softmax into ``_safe_softmax``, which returns 0 instead
of NaN for a row that masks every key; the plain softmax here gives such a row equal weights
(every score is ``MASKED``), the same as the ``finfo.min`` fills libraries use. Rows with a key
to attend are exact. int8 scores are never -inf, so the guard could never apply on the device.
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.graph.schema import bind
from mcu_npu.passes.aten._recurrent import (Emitter, constant_attr, is_call, replace_nodes,
                                             static_shape)

aten = torch.ops.aten
SDPA = aten.scaled_dot_product_attention.default


MASKED = torch.finfo(torch.float32).min
"""The score a masked position gets: finite, so the float graph never computes inf - inf."""


def _from_constants(node: Node) -> bool:
    """``node`` is computed from parameters, buffers and creation ops alone."""
    seen, work = set(), [node]
    while work:
        n = work.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder" or n.op not in ("get_attr", "call_function"):
            return False
        work.extend(n.all_input_nodes)
    return True


def _rewritable(node: Node) -> bool:
    """An SDPA call without dropout or grouped heads whose mask, if any, is computed from
    constants, on static shapes of rank 3 or more whose batch dims agree."""
    if not is_call(node, SDPA):
        return False
    a = bind(node)
    if a.dropout_p != 0.0 or getattr(a, "enable_gqa", False) or \
            (a.attn_mask is not None and (a.is_causal or not _from_constants(a.attn_mask))):
        return False
    try:
        shapes = [static_shape(n) for n in (a.query, a.key, a.value)]
    except Exception:  # no shape metadata or a dynamic shape: left to torch
        return False
    q, k, v = shapes
    if a.attn_mask is not None:
        try:
            m = static_shape(a.attn_mask)
            torch.broadcast_shapes(m, (*q[:-1], k[-2]))
        except Exception:  # no shape, or a mask that does not broadcast: left to torch
            return False
    return len(q) >= 3 and len(k) == len(v) == len(q) and q[:-2] == k[:-2] == v[:-2] and \
        q[-1] == k[-1] and k[-2] == v[-2]


def _bias(gm: GraphModule, emit: Emitter, a, q: tuple, s: int) -> Node | None:
    """The additive mask of ``a`` (its float mask, or its boolean / causal mask as 0 and
    ``MASKED``) in the shape of the 3-D scores [N, L, S], or broadcasting to it; None if
    unmasked."""
    mask = a.attn_mask
    if mask is None and not a.is_causal:
        return None
    if mask is None:  # tril(ones(L, S)), as torch's own causal mask: key j <= query i
        causal = torch.ones(q[-2], s, dtype=torch.bool).tril()
        mask = constant_attr(gm, emit.source, f"causal_mask_{emit.source.name}",
                             torch.where(causal, 0.0, MASKED))
    elif mask.meta["val"].dtype == torch.bool:
        mask = emit(aten.where.Scalar, mask, 0.0, MASKED)
    shape = static_shape(mask)
    shape = (1,) * (len(q) - len(shape)) + shape
    if math.prod(shape[:-2]) == 1:
        return emit(aten.reshape.default, mask, [1, *shape[-2:]])
    full = emit(aten.expand.default, mask, [*q[:-2], *shape[-2:]])
    return emit(aten.reshape.default, full, [math.prod(q[:-2]), *shape[-2:]])


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
    bias = _bias(gm, emit, a, q, k[-2])
    if bias is not None:
        scores = emit(aten.add.Tensor, scores, bias)
    weights = emit(aten.softmax.int, scores, -1)
    out = emit(aten.bmm.default, weights, v3)
    return emit(aten.view.default, out, [*q[:-1], v[-1]])


class DecomposeScaledDotProductAttention(PassBase):
    """Rewrite every ``scaled_dot_product_attention`` without dropout whose mask (if any) is
    computed from constants into bmm / mul / add / softmax."""

    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module, replace_nodes(graph_module, _rewritable, _decompose))
