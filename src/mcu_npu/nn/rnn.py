"""Quantizable Elman RNN: ``h' = act(W_ih x + b_ih + W_hh h + b_hh)`` with act tanh or relu."""

from __future__ import annotations

from typing import Optional

from torch import Tensor, nn
from torch.ao.nn.quantized import FloatFunctional

from mcu_npu.nn._recurrent import CellBase, RecurrentBase, State

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


class RNNCell(CellBase):
    """Drop-in for ``nn.RNNCell``; ``nonlinearity`` is ``"tanh"`` or ``"relu"``."""

    _float_cls = nn.RNNCell

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh"):
        super().__init__(input_size, hidden_size, bias)
        if nonlinearity not in _ACTIVATIONS:
            raise ValueError(f"unknown nonlinearity {nonlinearity!r}; expected 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        self.add_h = FloatFunctional()
        self.activation = _ACTIVATIONS[nonlinearity]()

    def step(self, x_proj: Tensor, state: State) -> State:
        return (self.activation(self.add_h.add(x_proj, self.hh(state[0]))),)

    def forward(self, input: Tensor, hx: Optional[Tensor] = None) -> Tensor:
        return self._run(input, None if hx is None else (hx,))[0]

    @classmethod
    def _kwargs_from_float(cls, mod: nn.Module) -> dict:
        return {"nonlinearity": mod.nonlinearity}


class RNN(RecurrentBase):
    """Drop-in for ``nn.RNN`` (tanh or relu, multi-layer, bidirectional, batch_first, bias)."""

    cell_cls = RNNCell
    _float_cls = nn.RNN

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         nonlinearity=nonlinearity)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
        output, (h_n,) = self._run(input, None if hx is None else (hx,))
        return output, h_n

    @classmethod
    def _kwargs_from_float(cls, mod: nn.Module) -> dict:
        return {"nonlinearity": mod.nonlinearity}
