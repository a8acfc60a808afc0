"""SaturateAttentionMask: a constant attention mask before a softmax becomes one add of 0 and
``MASKED`` that the quantizer saturates, so masked attention runs in int8.

Spellings accepted (``m`` a constant after ``FoldConstants``: a buffer, or what a padding or
causal mask made at run time from constants folded into; ``v`` at most ``MASKED_AT``, e.g.
``-inf``, ``torch.finfo(dtype).min``, ``-1e4``)::

    softmax(s + bias)                     # bias: float, some entries <= MASKED_AT (SDPA's
    softmax(bias + s)                     #   float or boolean mask, decomposed; HF's additive)
    softmax(s.masked_fill(m, v))          # GPT-style causal masking of the scores
    softmax(where(m, s, v)), softmax(where(m, v, s))

After::

    softmax(s)                            # bias all 0 (an all-ones padding mask made additive)
    softmax(add(s + finite, mask))        # finite: bias with its masked entries 0 (when any
                                          #   entry is neither 0 nor masked); mask: 0 or MASKED

Exact in float: ``s + MASKED`` rounds to ``MASKED`` as a fill does, and ``exp`` of a masked
score is 0 either way. In int8 an additive ``-inf`` or ``-3.4e38`` would set the scale of the
add (every kept score would round to one value) and of the mask constant (the int8 ADD would
lose the scores beside it). The add is tagged (``MASK_KEY``) so the quantizer gives it
instead: an output range observed over the kept scores only and widened below by
``ln(2048)`` (a masked weight below an eighth of a softmax output step), and a mask constant on the
scale of that range, so that masked scores saturate to the range's floor and kept ones are
added 0, exactly.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.graph.schema import bind
from mcu_npu.passes.aten._recurrent import Emitter, constant_attr, finish, is_call
from mcu_npu.passes.aten.decompose_scaled_dot_product_attention import MASKED
from mcu_npu.passes.aten.fold_constants import _delete_attr

aten = torch.ops.aten

MASK_KEY = "mcu_npu_attention_mask"
"""Node meta marking the add of a 0 / ``MASKED`` attention mask (read by the quantizer)."""

MASKED_AT = -1e3
"""A mask entry at or below this masks its position (BERT's -10000, ``finfo.min``, -inf, and
-1e4 plus a small bias): exp(-1000) is 0 in float32, so the softmax weight is 0 already."""

_SOFTMAX = (aten.softmax.int, aten._softmax.default)


def _constant(gm: GraphModule, arg) -> torch.Tensor | None:
    """The value of a constant operand: a ``get_attr`` tensor or a Python number."""
    if isinstance(arg, (int, float)) and not isinstance(arg, bool):
        return torch.tensor(float(arg))
    if isinstance(arg, Node) and arg.op == "get_attr":
        value = operator.attrgetter(arg.target)(gm)
        return value if isinstance(value, torch.Tensor) else None
    return None


def _all_masked(value: torch.Tensor | None) -> bool:
    return value is not None and value.is_floating_point() and \
        bool((value <= MASKED_AT).all())


def _mask_of(gm: GraphModule, x: Node):
    """(scores, masked positions, finite bias or None) of the masking op ``x``; (scores,
    None, None) for an add of zeros; None if ``x`` is neither."""
    if is_call(x, aten.add.Tensor) and bind(x).alpha == 1:
        for s, c in (x.args[:2], x.args[1::-1]):
            value = _constant(gm, c)
            if isinstance(s, Node) and _constant(gm, s) is None and value is not None and \
                    value.is_floating_point() and bool((value <= MASKED_AT).any()):
                masked = value <= MASKED_AT
                finite = torch.where(masked, 0.0, value)
                return s, masked, (finite if bool(finite.ne(0).any()) else None)
            if value is not None and isinstance(s, Node) and bool((value == 0).all()) and \
                    _same_shape(s, x):
                return s, None, None  # a mask of all ones made additive: nothing masked
    if x.target in (aten.masked_fill.Scalar, aten.masked_fill.Tensor):
        s, m, v = x.args[:3]
        cond = _constant(gm, m)
        if cond is not None and cond.dtype == torch.bool and _all_masked(_constant(gm, v)):
            return s, cond, None
    if x.target in (aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf):
        m, a, b = x.args[:3]
        cond = _constant(gm, m)
        if cond is None or cond.dtype != torch.bool:
            return None
        if isinstance(a, Node) and _constant(gm, a) is None and _all_masked(_constant(gm, b)):
            return a, ~cond, None
        if isinstance(b, Node) and _constant(gm, b) is None and _all_masked(_constant(gm, a)):
            return b, cond, None
    return None


def _same_shape(a: Node, b: Node) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    return isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor) and \
        va.shape == vb.shape and va.dtype == vb.dtype


def _rewrite(gm: GraphModule, x: Node, scores: Node, masked: torch.Tensor | None,
             finite: torch.Tensor | None) -> None:
    if masked is None:  # an all-zero bias: the scores as they are
        x.replace_all_uses_with(scores)
        gm.graph.erase_node(x)
        return
    emit = Emitter(gm.graph, x)
    if finite is not None:
        bias = constant_attr(gm, x, f"attention_bias_{x.name}", finite.float())
        scores = emit(aten.add.Tensor, scores, bias)
    mask = constant_attr(gm, x, f"attention_mask_{x.name}",
                         torch.where(masked, MASKED, 0.0).float())
    add = emit(aten.add.Tensor, scores, mask)
    add.meta[MASK_KEY] = True
    x.replace_all_uses_with(add)
    gm.graph.erase_node(x)


class SaturateAttentionMask(PassBase):
    """Rewrite every constant mask before a softmax into an add of 0 / ``MASKED`` tagged
    ``MASK_KEY``."""

    def call(self, graph_module: GraphModule) -> PassResult:
        found = []
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and node.target in _SOFTMAX and \
                    isinstance(node.args[0], Node) and node.args[0].op == "call_function" and \
                    MASK_KEY not in node.args[0].meta:
                mask = _mask_of(graph_module, node.args[0])
                if mask is not None:
                    found.append((node.args[0], mask))
        read = {n.target for x, _ in found for n in x.all_input_nodes if n.op == "get_attr"}
        for x, (scores, masked, finite) in found:
            _rewrite(graph_module, x, scores, masked, finite)
        if found:
            graph_module.graph.eliminate_dead_code()
            kept = {n.target for n in graph_module.graph.nodes if n.op == "get_attr"}
            for target in read - kept:
                _delete_attr(graph_module, target)
            finish(graph_module)
        return PassResult(graph_module, bool(found))
