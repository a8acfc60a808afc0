"""Quantizable GRU: ``nn.Linear`` projections plus observable arithmetic.

    r, z = sigmoid(W_i[r,z] x + b_i[r,z] + W_h[r,z] h + b_h[r,z])
    n    = tanh(W_in x + b_in + r * (W_hn h + b_hn))
    h'   = n + z * (h - n)                    # == (1 - z) * n + z * h
"""

from __future__ import annotations

from typing import Optional

from torch import Tensor, nn
from torch.ao.nn.quantized import FloatFunctional

from mcu_npu.nn._recurrent import CellBase, RecurrentBase, State


class GRUCell(CellBase):
    """Drop-in for ``nn.GRUCell`` whose adds, muls and activations each have an observer slot."""

    num_gates = 3
    _float_cls = nn.GRUCell

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__(input_size, hidden_size, bias)
        self.add_rz = FloatFunctional()
        self.sigmoid_rz = nn.Sigmoid()
        self.mul_r = FloatFunctional()
        self.add_n = FloatFunctional()
        self.tanh_n = nn.Tanh()
        self.neg_n = FloatFunctional()
        self.sub_hn = FloatFunctional()
        self.mul_z = FloatFunctional()
        self.add_h = FloatFunctional()

    def step(self, x_proj: Tensor, state: State) -> State:
        (h,) = state
        h_proj = self.hh(h)
        rz = self.sigmoid_rz(self.add_rz.add(self.gate(x_proj, 0, 2), self.gate(h_proj, 0, 2)))
        r, z = self.gate(rz, 0), self.gate(rz, 1)
        n = self.tanh_n(self.add_n.add(self.gate(x_proj, 2), self.mul_r.mul(r, self.gate(h_proj, 2))))
        h_minus_n = self.sub_hn.add(h, self.neg_n.mul_scalar(n, -1.0))
        return (self.add_h.add(n, self.mul_z.mul(z, h_minus_n)),)

    def forward(self, input: Tensor, hx: Optional[Tensor] = None) -> Tensor:
        return self._run(input, None if hx is None else (hx,))[0]


class GRU(RecurrentBase):
    """Drop-in for ``nn.GRU`` (multi-layer, bidirectional, batch_first, bias) built from ``GRUCell``."""

    cell_cls = GRUCell
    _float_cls = nn.GRU

    def forward(self, input: Tensor, hx: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
        output, (h_n,) = self._run(input, None if hx is None else (hx,))
        return output, h_n
