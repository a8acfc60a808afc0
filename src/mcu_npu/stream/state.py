"""The state a stream keeps between frames, as modules with registered buffers updated in
place (``copy_``), so ``torch.export`` records them as buffer mutations and a compiled
program keeps them between runs.

Every module here holds its initial value and ``reset()`` puts it back.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class StreamState(nn.Module):
    """Base of the state modules: ``reset()`` sets every buffer back to its initial value
    (kept in ``_initial``, a plain dict so it is neither a buffer nor exported)."""

    _is_impure = True  # a call updates state: dead-code elimination keeps it

    def _keep_initial(self) -> None:
        self._initial = {name: b.detach().clone() for name, b in self.named_buffers()}

    @torch.no_grad()
    def reset(self) -> None:
        for name, buffer in self.named_buffers():
            buffer.copy_(self._initial[name])


class FrameRing(StreamState):
    """The last ``length`` frames before the current one, along the last axis: returns the
    window ``cat([ring, frame])`` (``length + 1`` frames) and keeps its last ``length``.

    The initial ring is what the sequence model's left padding puts before frame 1, so a
    convolution over the window gives the sequence model's output at every frame.
    """

    def __init__(self, initial: Tensor):
        super().__init__()
        self.register_buffer("ring", initial.detach().clone())
        self._keep_initial()

    def forward(self, frame: Tensor) -> Tensor:
        window = torch.cat([self.ring, frame], dim=-1)
        self.ring.copy_(window[..., 1:])
        return window


class RunningStatistic(StreamState):
    """A reduction over all frames so far, one frame per call: ``mean`` (running sum and a
    frame counter, the sum divided by the count), ``sum`` or ``amax``.

    The mean over frames 1..t is what the sequence model's mean over time gives on those
    frames; it is the cumulative mean, not a mean over a sliding window.
    """

    def __init__(self, kind: str, frame_shape: tuple[int, ...], dtype=torch.float32):
        super().__init__()
        if kind not in ("mean", "sum", "amax"):
            raise ValueError(f"unknown running statistic {kind!r}")
        self.kind = kind
        start = float("-inf") if kind == "amax" else 0.0
        self.register_buffer("value", torch.full(frame_shape, start, dtype=dtype))
        if kind == "mean":
            self.register_buffer("count", torch.zeros((), dtype=dtype))
        self._keep_initial()

    def forward(self, frame: Tensor) -> Tensor:
        if self.kind == "amax":
            value = torch.maximum(self.value, frame)
            self.value.copy_(value)
            return value
        total = self.value + frame
        self.value.copy_(total)
        if self.kind == "sum":
            return total
        count = self.count + 1.0
        self.count.copy_(count)
        return total / count


class RecurrentState(StreamState):
    """The hidden state of a GRU or RNN (``h``), or of an LSTM (``h`` and ``c``), between
    steps; the step itself is the recurrent op on one frame, reading these buffers and
    writing its final state back (``forward``)."""

    def __init__(self, h: Tensor, c: Tensor | None = None):
        super().__init__()
        self.register_buffer("h", h.detach().clone())
        if c is not None:
            self.register_buffer("c", c.detach().clone())
        self._keep_initial()

    def forward(self, h: Tensor, c: Tensor | None = None) -> None:
        """Keep the step's final state (``h``, and ``c`` for an LSTM)."""
        self.h.copy_(h)
        if c is not None:
            self.c.copy_(c)
