"""FoldLinearOfZeros: ``linear(0, W, b)`` is ``b``; no matmul for an all-zero input.

Before::

    h0 = zeros(L, 1, H)                          # a recurrent layer called without a state
    Hp = linear(select(h0, 0, l), W_hh, b_hh)    # the first step's recurrent matmul

After::

    Hp = reshape(b_hh, [1, 3H])                  # the matmul of zeros leaves the bias

An input is all zeros when it is a ``zeros`` (or ``full`` of 0) seen through select, slice,
view-like and unsqueeze ops. Only outputs with a single row are rewritten (a reshaped bias
has the output's shape exactly); linears without a bias are left alone.
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, finish, static_shape
from ...graph.schema import bind

aten = torch.ops.aten

_VIEWS = {aten.select.int, aten.slice.Tensor, aten.unsqueeze.default, aten.squeeze.dim,
          aten.squeeze.dims, aten.view.default, aten.reshape.default, aten.clone.default}


def is_zeros(node) -> bool:
    """``node`` is an all-zero tensor made in the graph (seen through views)."""
    while isinstance(node, Node) and node.op == "call_function" and node.target in _VIEWS:
        node = node.args[0]
    if not isinstance(node, Node) or node.op != "call_function":
        return False
    if node.target in (aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default):
        return True
    return node.target == aten.full.default and node.args[1] == 0


def _bias(node: Node):
    return bind(node).bias


class FoldLinearOfZeros(PassBase):
    """Replace every single-row ``aten.linear`` of an all-zero input by its bias."""

    def call(self, graph_module: GraphModule) -> PassResult:
        found = [n for n in graph_module.graph.nodes
                 if n.op == "call_function" and n.target == aten.linear.default
                 and isinstance(_bias(n), Node) and is_zeros(n.args[0])
                 and math.prod(static_shape(n)[:-1]) == 1]
        for node in found:
            bias = Emitter(graph_module.graph, node)(aten.view.default, _bias(node),
                                                      list(static_shape(node)))
            node.replace_all_uses_with(bias)
            graph_module.graph.erase_node(node)
        if found:
            graph_module.graph.eliminate_dead_code()
            finish(graph_module)
        return PassResult(graph_module, bool(found))
