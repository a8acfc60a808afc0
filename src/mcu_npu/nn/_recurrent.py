"""Shared parts of the quantizable recurrent modules: cell base, multi-layer driver, weight copy.

A cell owns two ``nn.Linear`` (``ih``: input to all gates, ``hh``: hidden to all gates, in
PyTorch's gate order) and one ``FloatFunctional`` / activation module per arithmetic role, so
eager-mode observers get a distinct place for every tensor they should measure. The
multi-layer driver applies ``ih`` once to the whole sequence and only ``hh`` inside the
static time loop, which keeps the modules exportable with ``torch.export``.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn
from torch.ao.nn.quantized import FloatFunctional

State = tuple[Tensor, ...]


def _copy_linear(linear: nn.Linear, weight: Tensor, bias: Optional[Tensor]) -> None:
    with torch.no_grad():
        linear.weight.copy_(weight)
        if bias is not None:
            linear.bias.copy_(bias)


class CellBase(nn.Module):
    """A recurrent cell split into input projection (``ih``) and one step (``step``)."""

    num_gates = 1
    num_states = 1
    _float_cls: type = nn.Module

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.ih = nn.Linear(input_size, self.num_gates * hidden_size, bias=bias)
        self.hh = nn.Linear(hidden_size, self.num_gates * hidden_size, bias=bias)

    def step(self, x_proj: Tensor, state: State) -> State:
        """New state from ``ih(x_t)`` and the previous state; ``state[0]`` is the output ``h``."""
        raise NotImplementedError

    def gate(self, proj: Tensor, first: int, count: int = 1) -> Tensor:
        """``count`` adjacent gates starting at gate ``first`` of a ``[B, G*H]`` projection."""
        h = self.hidden_size
        return proj[:, first * h:(first + count) * h]

    def _run(self, input: Tensor, state: Optional[State]) -> State:
        """One step on a batched ``[B, in]`` or unbatched ``[in]`` input, torch-cell style."""
        unbatched = input.dim() == 1
        if unbatched:
            input = input.unsqueeze(0)
            state = None if state is None else tuple(s.unsqueeze(0) for s in state)
        if state is None:
            zeros = input.new_zeros(input.shape[0], self.hidden_size)
            state = (zeros,) * self.num_states
        new = self.step(self.ih(input), state)
        return tuple(s.squeeze(0) for s in new) if unbatched else new

    def copy_weights(self, w_ih: Tensor, w_hh: Tensor, b_ih: Optional[Tensor], b_hh: Optional[Tensor]) -> None:
        _copy_linear(self.ih, w_ih, b_ih)
        _copy_linear(self.hh, w_hh, b_hh)

    @classmethod
    def _kwargs_from_float(cls, mod: nn.Module) -> dict:
        return {}

    @classmethod
    def from_float(cls, mod: nn.Module) -> "CellBase":
        """A copy of the torch cell ``mod`` (same sizes, weights, training flag)."""
        if not isinstance(mod, cls._float_cls):
            raise TypeError(f"{cls.__name__}.from_float expects {cls._float_cls.__name__}, got {type(mod).__name__}")
        cell = cls(mod.input_size, mod.hidden_size, mod.bias, **cls._kwargs_from_float(mod))
        cell.copy_weights(mod.weight_ih, mod.weight_hh, mod.bias_ih, mod.bias_hh)
        return _finish_copy(cell, mod)


def _finish_copy(new: nn.Module, mod: nn.Module) -> nn.Module:
    if hasattr(mod, "qconfig"):
        new.qconfig = mod.qconfig
    return new.train(mod.training).to(next(mod.parameters()).device)


class RecurrentBase(nn.Module):
    """Multi-layer, optionally bidirectional recurrence over ``cell_cls`` cells (torch API)."""

    cell_cls: type = CellBase
    _float_cls: type = nn.Module

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, **cell_kwargs):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        d = self.num_directions
        self.cells = nn.ModuleList(
            self.cell_cls(input_size if layer == 0 else d * hidden_size, hidden_size, bias, **cell_kwargs)
            for layer in range(num_layers) for _ in range(d)
        )
        self.cat_directions = nn.ModuleList(FloatFunctional() for _ in range(num_layers if d == 2 else 0))
        self.cat_states = nn.ModuleList(FloatFunctional() for _ in range(self.cell_cls.num_states))
        self.inter_layer_dropout = nn.Dropout(self.dropout)

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _run(self, input: Tensor, state: Optional[State]) -> tuple[Tensor, State]:
        """``(output, stacked final states)`` for input ``[T, B, in]`` / ``[B, T, in]`` / ``[T, in]``."""
        unbatched = input.dim() == 2
        td = 1 if self.batch_first and not unbatched else 0
        if unbatched:
            input = input.unsqueeze(1)
            state = None if state is None else tuple(s.unsqueeze(1) for s in state)
        batch = input.shape[1 - td]
        if state is None:
            zeros = input.new_zeros(self.num_layers * self.num_directions, batch, self.hidden_size)
            state = (zeros,) * self.cell_cls.num_states
        x, finals = input, []
        for layer in range(self.num_layers):
            if layer:
                x = self.inter_layer_dropout(x)
            outs = []
            for d in range(self.num_directions):
                index = layer * self.num_directions + d
                out, last = self._direction(self.cells[index], x, tuple(s[index] for s in state), td, d == 1)
                outs.append(out)
                finals.append(last)
            x = outs[0] if len(outs) == 1 else self.cat_directions[layer].cat(outs, 2)
        stacked = tuple(
            cat.cat([f[k].unsqueeze(0) for f in finals], 0) for k, cat in enumerate(self.cat_states)
        )
        if unbatched:
            return x.squeeze(1), tuple(s.squeeze(1) for s in stacked)
        return x, stacked

    @staticmethod
    def _direction(cell: CellBase, x: Tensor, state: State, td: int, reverse: bool) -> tuple[Tensor, State]:
        x_proj = cell.ih(x)
        seq_len = x.shape[td]
        steps: list[Tensor] = []
        for t in (reversed(range(seq_len)) if reverse else range(seq_len)):
            state = cell.step(x_proj.select(td, t), state)
            steps.append(state[0])
        if reverse:
            steps.reverse()
        return torch.stack(steps, td), state

    @classmethod
    def _kwargs_from_float(cls, mod: nn.Module) -> dict:
        return {}

    @classmethod
    def from_float(cls, mod: nn.Module) -> "RecurrentBase":
        """A copy of the torch module ``mod`` (layers, directions, bias, batch_first, weights)."""
        if not isinstance(mod, cls._float_cls):
            raise TypeError(f"{cls.__name__}.from_float expects {cls._float_cls.__name__}, got {type(mod).__name__}")
        new = cls(mod.input_size, mod.hidden_size, num_layers=mod.num_layers, bias=mod.bias,
                  batch_first=mod.batch_first, dropout=mod.dropout, bidirectional=mod.bidirectional,
                  **cls._kwargs_from_float(mod))
        for layer in range(mod.num_layers):
            for d, suffix in enumerate(["", "_reverse"][:new.num_directions]):
                names = [f"{k}_l{layer}{suffix}" for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
                new.cells[layer * new.num_directions + d].copy_weights(*(getattr(mod, n, None) for n in names))
        return _finish_copy(new, mod)
