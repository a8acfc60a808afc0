"""DecomposeRNN: rewrite ``aten.rnn_tanh.input`` / ``aten.rnn_relu.input`` into elementary ops.

Per layer and direction, with ``act`` tanh or relu::

    X = linear(x[0:T], W_ih, b_ih)               # one matmul for all steps
    for t:                                       # reversed for the backward direction
        h = act(X_t + linear(h, W_hh, b_hh))     # one recurrent matmul per step

Outputs are the per-step ``h`` concatenated over time (directions on the feature axis)
and ``h_n``, the final states stacked on dim 0.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, run_decomposition

aten = torch.ops.aten

_ACTIVATION = {aten.rnn_tanh.input: aten.tanh.default, aten.rnn_relu.input: aten.relu.default}


def rnn_cell(activation):
    """An Elman step ``h = act(X_t + W_hh h + b_hh)`` with the given activation op."""

    def cell(emit: Emitter, x_t, h_proj, state, hidden):
        return (emit(activation, emit(aten.add.Tensor, x_t, h_proj)),)

    return cell


class DecomposeRNN(PassBase):
    """Replace every ``aten.rnn_tanh.input`` and ``aten.rnn_relu.input`` node by elementary ops."""

    def call(self, graph_module: GraphModule) -> PassResult:
        modified = run_decomposition(
            graph_module, tuple(_ACTIVATION), lambda node: rnn_cell(_ACTIVATION[node.target])
        )
        return PassResult(graph_module, modified)
