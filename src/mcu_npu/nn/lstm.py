"""Quantizable LSTM (``proj_size == 0``), gate order i, f, g, o.

    i, f, o = sigmoid(...);  g = tanh(...)      # of W_ih x + b_ih + W_hh h + b_hh
    c' = f * c + i * g
    h' = o * tanh(c')
"""

from __future__ import annotations

from typing import Optional

from torch import Tensor, nn
from torch.ao.nn.quantized import FloatFunctional

from mcu_npu.nn._recurrent import CellBase, RecurrentBase, State
from mcu_npu.passes.aten._recurrent import PROJ_SIZE_MESSAGE, ProjSizeNotSupportedError


class LSTMCell(CellBase):
    """Drop-in for ``nn.LSTMCell``; returns ``(h', c')``."""

    num_gates = 4
    num_states = 2
    _float_cls = nn.LSTMCell

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__(input_size, hidden_size, bias)
        self.add_gates = FloatFunctional()
        self.sigmoid_if = nn.Sigmoid()
        self.tanh_g = nn.Tanh()
        self.sigmoid_o = nn.Sigmoid()
        self.mul_fc = FloatFunctional()
        self.mul_ig = FloatFunctional()
        self.add_c = FloatFunctional()
        self.tanh_c = nn.Tanh()
        self.mul_oc = FloatFunctional()

    def step(self, x_proj: Tensor, state: State) -> State:
        h, c = state
        pre = self.add_gates.add(x_proj, self.hh(h))
        i_f = self.sigmoid_if(self.gate(pre, 0, 2))
        g = self.tanh_g(self.gate(pre, 2))
        o = self.sigmoid_o(self.gate(pre, 3))
        c = self.add_c.add(self.mul_fc.mul(self.gate(i_f, 1), c), self.mul_ig.mul(self.gate(i_f, 0), g))
        return self.mul_oc.mul(o, self.tanh_c(c)), c

    def forward(self, input: Tensor, hx: Optional[tuple[Tensor, Tensor]] = None) -> tuple[Tensor, Tensor]:
        h, c = self._run(input, None if hx is None else tuple(hx))
        return h, c


class LSTM(RecurrentBase):
    """Drop-in for ``nn.LSTM`` with ``proj_size == 0``; returns ``(output, (h_n, c_n))``."""

    cell_cls = LSTMCell
    _float_cls = nn.LSTM

    def forward(self, input: Tensor, hx: Optional[tuple[Tensor, Tensor]] = None):
        output, (h_n, c_n) = self._run(input, None if hx is None else tuple(hx))
        return output, (h_n, c_n)

    @classmethod
    def _kwargs_from_float(cls, mod: nn.Module) -> dict:
        if mod.proj_size > 0:
            raise ProjSizeNotSupportedError(PROJ_SIZE_MESSAGE)
        return {}
