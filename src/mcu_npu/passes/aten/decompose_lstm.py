"""DecomposeLSTM: rewrite ``aten.lstm.input`` into linear/add/mul/sigmoid/tanh/slice/select/cat.

Per layer and direction, with the PyTorch gate order i, f, g, o::

    X = linear(x[0:T], W_ih, b_ih)               # one matmul for all steps and all gates
    for t:                                       # reversed for the backward direction
        G = X_t + linear(h, W_hh, b_hh)          # one recurrent matmul per step
        i, f = split(sigmoid(G[:, :2H]));  g = tanh(G[:, 2H:3H]);  o = sigmoid(G[:, 3H:])
        c = f * c + i * g
        h = o * tanh(c)

Outputs are the per-step ``h`` concatenated over time (directions on the feature axis),
``h_n`` and ``c_n``. Only ``proj_size == 0`` is handled: a projected LSTM raises
``ProjSizeNotSupportedError``.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, gate, gates, run_decomposition

aten = torch.ops.aten


def lstm_cell(emit: Emitter, x_t, h_proj, state, hidden):
    """One LSTM step from the input and recurrent projections (gates i, f, g, o)."""
    _, c = state
    pre = emit(aten.add.Tensor, x_t, h_proj)
    i_f = emit(aten.sigmoid.default, gates(emit, pre, 0, 2, hidden))
    g = emit(aten.tanh.default, gate(emit, pre, 2, hidden))
    o = emit(aten.sigmoid.default, gate(emit, pre, 3, hidden))
    c = emit(aten.add.Tensor,
             emit(aten.mul.Tensor, gate(emit, i_f, 1, hidden), c),
             emit(aten.mul.Tensor, gate(emit, i_f, 0, hidden), g))
    return emit(aten.mul.Tensor, o, emit(aten.tanh.default, c)), c


class DecomposeLSTM(PassBase):
    """Replace every ``aten.lstm.input`` node by its unrolled elementary-op equivalent."""

    def call(self, graph_module: GraphModule) -> PassResult:
        modified = run_decomposition(graph_module, (aten.lstm.input,), lambda node: lstm_cell)
        return PassResult(graph_module, modified)
