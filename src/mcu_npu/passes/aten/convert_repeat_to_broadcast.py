"""ConvertRepeatToBroadcast: a ``repeat`` that only tiles axes of size 1, or an ``expand``,
becomes a broadcast, before quantization.

Before::

    s = mean(y, 2, keepdim=True)           # (N, C, 1): a statistic over time
    z = mul(y, repeat(s, [1, 1, 100]))     # squeeze-excite over 100 frames
    c = cat([y, repeat(s, [1, 1, 100])], 1)   # attentive statistics pooling's context
    o = mul(relu(v), expand(ctx, v.shape))    # MobileViT-v2's separable attention

After::

    z = mul(y, s)                          # the elementwise op broadcasts: no copy at all
    c = cat([y, mul(s, ones(1, 1, 100))], 1)
    o = mul(relu(v), ctx)

A repeat or expand read by elementwise ops (add, sub, mul, div) whose other operand already
has the repeated shape is dropped: the op broadcasts. Otherwise an expand, or a repeat
beyond ``ConvertRepeatToCat``'s ``MAX_COPIES``, is a multiplication by a constant of ones,
which every NPU broadcasts (in int8 the ones are exact, the product takes the input's
range); no NPU compiler takes a BROADCAST_TO. Exact in float.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, constant_attr, finish
from mcu_npu.passes.aten.convert_repeat_to_cat import MAX_COPIES

aten = torch.ops.aten
_BROADCASTING = (aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.div.Tensor)
_TILES = (aten.repeat.default, aten.expand.default, aten.expand_as.default,
          aten.expand_copy.default)


def _shape(node) -> tuple | None:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def _factors(node: Node) -> list[int] | None:
    """How many copies of each axis a repeat that copies only axes of size 1 (or new
    leading ones), or an expand, of a floating-point tensor makes; None for another node."""
    if node.op != "call_function" or node.target not in _TILES:
        return None
    val = node.args[0].meta.get("val") if isinstance(node.args[0], Node) else None
    if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point:
        return None
    shape, out = _shape(node.args[0]), _shape(node)
    if shape is None or out is None or not all(isinstance(d, int) for d in (*shape, *out)):
        return None
    shape = (1,) * (len(out) - len(shape)) + shape
    if not all(d == o or d == 1 for d, o in zip(shape, out)):
        return None
    return [o // d for d, o in zip(shape, out)]


def _broadcasts(user: Node, repeat: Node) -> bool:
    """``user`` is an elementwise op that gives the same result reading the repeat's input."""
    if user.op != "call_function" or user.target not in _BROADCASTING or \
            len(user.args) != 2 or user.kwargs.get("alpha", 1) != 1:
        return False
    a, b = user.args
    other = b if a is repeat else a
    if other is repeat:
        return False
    shapes = [_shape(repeat.args[0]), _shape(other) if isinstance(other, Node) else ()]
    if None in shapes or _shape(user) is None:
        return False
    try:
        return tuple(torch.broadcast_shapes(*shapes)) == _shape(user)
    except RuntimeError:
        return False


class ConvertRepeatToBroadcast(PassBase):
    """Drop every repeat of unit axes or expand its elementwise readers broadcast anyway;
    make another expand, or a repeat of more than ``MAX_COPIES`` copies, a multiplication by
    ones."""

    def call(self, graph_module: GraphModule) -> PassResult:
        changed = False
        for node in [n for n in graph_module.graph.nodes if _factors(n) is not None]:
            source, factors = node.args[0], _factors(node)
            users = list(node.users)
            if users and all(_broadcasts(u, node) for u in users):
                node.replace_all_uses_with(source)
            else:
                copies = 1
                for r in factors:
                    copies *= r
                if copies <= MAX_COPIES and node.target == aten.repeat.default:
                    continue  # ConvertRepeatToCat's concatenation
                if copies == 1:
                    continue
                ones = constant_attr(graph_module, node, f"ones_{node.name}",
                                     torch.ones(factors, dtype=source.meta["val"].dtype))
                node.replace_all_uses_with(Emitter(graph_module.graph, node)(
                    aten.mul.Tensor, source, ones))
            graph_module.graph.erase_node(node)
            changed = True
        if changed:
            finish(graph_module)
        return PassResult(graph_module, changed)
