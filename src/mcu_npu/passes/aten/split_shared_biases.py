"""SplitSharedBiases: every convolution and linear layer reads its bias through a ``get_attr``
node of its own.

An int8 layer's bias is an int32 in the scale of its input times its weight. PT2E's prepare
puts one observer on a node for each kind and dtype of observer its users ask for, and every
user then shares it: a bias node that several layers read (the recurrent matmul of each
unrolled step of an RNN, GRU or LSTM; a module called twice) would be quantized once, in the
first layer's scale, and every other layer would read an int32 in a scale that is not its own.
The quantized reference dequantizes it correctly, but a kernel that adds the int32 as it is
(CMSIS-NN's, through ExecuTorch's Cortex-M lowering) adds a wrongly scaled bias. With a node
each, each bias gets its own observer and its own scale.

Before::

    b = get_attr("cell.bias_hh")
    y1 = linear(h1, W_hh, b)
    y2 = linear(h2, W_hh, b)

After::

    y1 = linear(h1, W_hh, get_attr("cell.bias_hh"))
    y2 = linear(h2, W_hh, get_attr("cell.bias_hh"))    # a second node, the same parameter
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.graph.schema import bind

aten = torch.ops.aten

LAYERS = (aten.linear.default, aten.conv1d.default, aten.conv2d.default,
          aten.conv_transpose1d.default, aten.conv_transpose2d.input, aten.convolution.default)
"""Ops whose ``bias`` argument is quantized from their input and weight scales."""


class SplitSharedBiases(PassBase):
    """Give each layer that shares its bias ``get_attr`` with an earlier one a new node."""

    def call(self, graph_module: GraphModule) -> PassResult:
        graph = graph_module.graph
        seen: set[Node] = set()
        modified = False
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target not in LAYERS:
                continue
            bias = bind(node).bias
            if not isinstance(bias, Node) or bias.op != "get_attr":
                continue
            if bias not in seen:
                seen.add(bias)
                continue
            with graph.inserting_before(node):
                own = graph.get_attr(bias.target)
            own.meta = dict(bias.meta)
            node.replace_input_with(bias, own)
            modified = True
        if modified:
            graph_module.recompile()
        return PassResult(graph_module, modified)
