"""LinearOfActivations: a linear layer whose weight is computed at run time is a matrix
product between two activations.

Before::

    y = linear(x, w, b)          # w a model input (or computed from one)

After::

    y = add(matmul(x, t(w)), b)  # no bias: y = matmul(x, t(w))

A linear's weight is quantized per output channel, which only a constant weight can be, and
FULLY_CONNECTED / the Cortex-M linear kernel take constant weights. A weight that is not
constant is an activation: as a matmul both operands get activation quantization, and the
matmul's own support checks decide where it runs. A weight is constant when it is a
parameter or buffer (``get_attr``) or is computed from those alone.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, replace_nodes
from ...graph.schema import bind

aten = torch.ops.aten


def is_constant(node, _seen: dict | None = None) -> bool:
    """``node`` is a parameter, a buffer, or computed from them alone."""
    if not isinstance(node, Node):
        return True
    seen = {} if _seen is None else _seen
    if node not in seen:
        if node.op == "get_attr":
            seen[node] = True
        elif node.op == "call_function":
            seen[node] = True  # provisional, for cycles (none in an FX graph)
            seen[node] = all(is_constant(a, seen) for a in node.all_input_nodes)
        else:
            seen[node] = False
    return seen[node]


def _bias(node: Node):
    return bind(node).bias


class LinearOfActivations(PassBase):
    """Rewrite every ``aten.linear`` whose weight is not constant into ``matmul`` (+ ``add``)."""

    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module, replace_nodes(graph_module, _runtime_weight, _matmul))


def _runtime_weight(node: Node) -> bool:
    return node.op == "call_function" and node.target == aten.linear.default and \
        not is_constant(node.args[1])


def _matmul(graph_module: GraphModule, node: Node) -> Node:
    emit = Emitter(graph_module.graph, node)
    out = emit(aten.matmul.default, node.args[0], emit(aten.t.default, node.args[1]))
    if isinstance(_bias(node), Node):
        out = emit(aten.add.Tensor, out, _bias(node))
    return out
