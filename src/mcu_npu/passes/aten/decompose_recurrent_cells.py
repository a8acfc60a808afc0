"""DecomposeRecurrentCells: one step of a recurrent cell (``nn.GRUCell``, ``nn.LSTMCell``,
``nn.RNNCell``) as the elementary ops ``DecomposeGRU`` / ``DecomposeLSTM`` /
``DecomposeRNN`` make of each step of a whole sequence, so the cell is quantized and placed
as they are.

Accepted: ``aten.gru_cell``, ``aten.lstm_cell`` (its ``(h, c)`` read through ``getitem``),
``aten.rnn_tanh_cell`` and ``aten.rnn_relu_cell``, with or without biases. A GRU step::

    X  = linear(x, W_ih, b_ih);  Xrz, Xn = X[:, :2H], X[:, 2H:]
    Hp = linear(h, W_hh, b_hh)
    r, z = split(sigmoid(Xrz + Hp[:, :2H]));  n = tanh(Xn + r * Hp[:, 2H:])
    h' = n + z * (h - n)

``nn.GRU`` / ``nn.LSTM`` called on one step with an explicit initial state need nothing
of this: their decompositions unroll the one step.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import STATE_OF, Emitter, finish, static_shape
from mcu_npu.passes.aten.decompose_gru import gru_cell
from mcu_npu.passes.aten.decompose_lstm import lstm_cell
from mcu_npu.passes.aten.decompose_rnn import rnn_cell

aten = torch.ops.aten

_CELLS = {aten.gru_cell.default: gru_cell, aten.lstm_cell.default: lstm_cell,
          aten.rnn_tanh_cell.default: rnn_cell(aten.tanh.default),
          aten.rnn_relu_cell.default: rnn_cell(aten.relu.default)}


class DecomposeRecurrentCells(PassBase):
    """Replace every recurrent cell call by its step's elementary ops."""

    def call(self, graph_module: GraphModule) -> PassResult:
        graph = graph_module.graph
        nodes = [n for n in graph.nodes if n.op == "call_function" and n.target in _CELLS]
        for node in nodes:
            x, hx, w_ih, w_hh, *biases = node.args
            b_ih, b_hh = (list(biases) + [None, None])[:2]
            cell = _CELLS[node.target]
            emit = Emitter(graph, node)
            hidden = static_shape(w_hh, graph_module)[1]
            state = tuple(hx) if isinstance(hx, (list, tuple)) else (hx,)
            x_proj = emit(aten.linear.default, x, w_ih, b_ih)
            groups = getattr(cell, "input_groups", None)
            if groups is not None:
                x_proj = tuple(emit(aten.slice.Tensor, x_proj, -1, first * hidden,
                                    (first + count) * hidden) for first, count in groups)
            h_proj = emit(aten.linear.default, state[0], w_hh, b_hh)
            out = cell(emit, x_proj, h_proj, state, hidden)
            for new, old in zip(out, state):
                new.meta[STATE_OF] = old.name
            if node.target is aten.lstm_cell.default:
                for user in list(node.users):
                    if user.target is not operator.getitem:
                        raise ValueError(f"{node.name} is read by {user.format_node()}, "
                                         "expected getitem")
                    user.replace_all_uses_with(out[user.args[1]])
                    graph.erase_node(user)
            else:
                node.replace_all_uses_with(out[0])
            graph.erase_node(node)
        if nodes:
            finish(graph_module)
        return PassResult(graph_module, bool(nodes))

