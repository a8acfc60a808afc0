"""SplitGRUByLayers: turn a multi-layer ``aten.gru.input`` into a chain of single-layer ones.

Before::

    out, h_n = gru(x, h0, [w_l0..., w_l1..., ...], num_layers=L)

After (D = 2 when bidirectional)::

    y0, h_0 = gru(x,  h0[0:D],   [w_l0...], num_layers=1)
    y1, h_1 = gru(y0, h0[D:2D],  [w_l1...], num_layers=1)     # dropout(y0) first in training
    ...
    out, h_n = y_{L-1}, cat([h_0, h_1, ...], 0)

Each layer is then a unit a backend (or ``DecomposeGRU``) can handle on its own; the
result is exactly the original computation.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, RecurrentCall, finish, replace_outputs

aten = torch.ops.aten


def _split(gm: GraphModule, call: RecurrentCall) -> None:
    emit = Emitter(gm.graph, call.node)
    d = call.num_directions
    (h0,) = call.hx
    x, finals = call.input, []
    for layer in range(call.num_layers):
        if layer and call.applies_dropout:
            x = emit(aten.dropout.default, x, call.dropout, True)
        h0_layer = emit(aten.slice.Tensor, h0, 0, layer * d, (layer + 1) * d)
        single = emit(aten.gru.input, x, h0_layer, call.layer_params(layer), call.has_biases,
                      1, 0.0, call.train, call.bidirectional, call.batch_first)
        x = emit(operator.getitem, single, 0)
        finals.append(emit(operator.getitem, single, 1))
    replace_outputs(gm, call.node, [x, emit(aten.cat.default, finals, 0)])


class SplitGRUByLayers(PassBase):
    """Rewrite every ``aten.gru.input`` with ``num_layers > 1`` into one call per layer."""

    def call(self, graph_module: GraphModule) -> PassResult:
        nodes = [n for n in graph_module.graph.nodes
                 if n.op == "call_function" and n.target == aten.gru.input]
        changed = False
        for node in nodes:  # read each call when its turn comes: splitting one GRU rewires
            call = RecurrentCall.from_node(node)  # the next one's input
            if call.num_layers > 1:
                _split(graph_module, call)
                changed = True
        if changed:
            finish(graph_module)
        return PassResult(graph_module, changed)
