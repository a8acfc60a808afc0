"""ConvertRepeatToBroadcast: a ``repeat`` that only tiles axes of size 1 becomes a broadcast,
before quantization.

Before::

    s = mean(y, 2, keepdim=True)           # (N, C, 1): a statistic over time
    z = mul(y, repeat(s, [1, 1, 100]))     # squeeze-excite over 100 frames
    c = cat([y, repeat(s, [1, 1, 100])], 1)   # attentive statistics pooling's context

After::

    z = mul(y, s)                          # the elementwise op broadcasts: no copy at all
    c = cat([y, mul(s, ones(1, 1, 100))], 1)

A repeat read by elementwise ops (add, sub, mul, div) whose other operand already has the
repeated shape is dropped: the op broadcasts. Otherwise, beyond ``ConvertRepeatToCat``'s
``MAX_COPIES``, the copies are a multiplication by a constant of ones, which every NPU
broadcasts (in int8 the ones are exact, the product takes the input's range). Exact in float.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, constant_attr, finish
from mcu_npu.passes.aten.convert_repeat_to_cat import MAX_COPIES

aten = torch.ops.aten
_BROADCASTING = (aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.div.Tensor)


def _shape(node) -> tuple | None:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def _tiles_unit_axes(node: Node) -> bool:
    """A repeat with static repeats that copies only axes of size 1 (or new leading ones)."""
    if node.op != "call_function" or node.target != aten.repeat.default:
        return False
    shape, repeats = _shape(node.args[0]), node.args[1]
    if shape is None or not all(isinstance(r, int) for r in repeats):
        return False
    shape = (1,) * (len(repeats) - len(shape)) + shape
    return all(r == 1 or d == 1 for d, r in zip(shape, repeats))


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
    """Drop every repeat of unit axes its elementwise readers broadcast anyway; make one of
    more than ``MAX_COPIES`` copies read otherwise a multiplication by ones."""

    def call(self, graph_module: GraphModule) -> PassResult:
        changed = False
        for node in [n for n in graph_module.graph.nodes if _tiles_unit_axes(n)]:
            source = node.args[0]
            users = list(node.users)
            if users and all(_broadcasts(u, node) for u in users):
                node.replace_all_uses_with(source)
            else:
                copies = 1
                for r in node.args[1]:
                    copies *= r
                if copies <= MAX_COPIES:
                    continue
                val = source.meta["val"]
                ones = constant_attr(graph_module, node, f"ones_{node.name}",
                                     torch.ones([r if r > 1 else 1 for r in node.args[1]],
                                                dtype=val.dtype))
                node.replace_all_uses_with(Emitter(graph_module.graph, node)(
                    aten.mul.Tensor, source, ones))
            graph_module.graph.erase_node(node)
            changed = True
        if changed:
            finish(graph_module)
        return PassResult(graph_module, changed)
