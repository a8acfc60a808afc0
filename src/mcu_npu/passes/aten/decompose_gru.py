"""DecomposeGRU: rewrite ``aten.gru.input`` into linear/add/mul/sigmoid/tanh/slice/select/cat.

Per layer and direction, with the PyTorch gate order r, z, n::

    X  = linear(x[0:T], W_ih, b_ih)              # one matmul for all steps and all gates
    Xrz, Xn = X[..., :2H], X[..., 2H:]           # cut once, so each step reads one slice
    for t:                                       # reversed for the backward direction
        Hp = linear(h, W_hh, b_hh)               # one recurrent matmul per step
        r, z = split(sigmoid(Xrz_t + Hp[:, :2H]))
        n = tanh(Xn_t + r * Hp[:, 2H:])
        h = n + z * (h - n)                      # == (1 - z) * n + z * h

Outputs are the per-step ``h`` concatenated over time (directions concatenated on the
feature axis) and ``h_n``, the final ``h`` of every layer and direction stacked on dim 0.
The weights are the original parameter nodes, so they stay the ``weight`` inputs of the
``aten.linear`` nodes a quantizer annotates.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, gate, gates, run_decomposition

aten = torch.ops.aten


def gru_cell(emit: Emitter, x_t, h_proj, state, hidden):
    """One GRU step from the input projection's (r z, n) parts and the recurrent projection."""
    (h,) = state
    x_rz, x_n = x_t
    rz = emit(aten.sigmoid.default, emit(aten.add.Tensor, x_rz, gates(emit, h_proj, 0, 2, hidden)))
    r = gate(emit, rz, 0, hidden)
    z = gate(emit, rz, 1, hidden)
    n = emit(aten.tanh.default,
             emit(aten.add.Tensor, x_n, emit(aten.mul.Tensor, r, gate(emit, h_proj, 2, hidden))))
    return (emit(aten.add.Tensor, n, emit(aten.mul.Tensor, z, emit(aten.sub.Tensor, h, n))),)


gru_cell.input_groups = ((0, 2), (2, 1))


class DecomposeGRU(PassBase):
    """Replace every ``aten.gru.input`` node by its unrolled elementary-op equivalent."""

    def call(self, graph_module: GraphModule) -> PassResult:
        modified = run_decomposition(graph_module, (aten.gru.input,), lambda node: gru_cell)
        return PassResult(graph_module, modified)
