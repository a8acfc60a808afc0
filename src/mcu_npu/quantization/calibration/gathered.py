"""MinMax observers that gather a calibration's runs and fold them in once.

``MinMaxObserver.forward`` spends seven tensor ops per call (detach, cast, ``aminmax``, min
and max against its buffers, two copies) to keep a running extreme, and
``PerChannelMinMaxObserver`` observes a layer's weight again on every calibration sample:
the same tensor, so the same extremes, through ``aminmax(dim=1)``, which with two intra-op
threads on a busy machine takes about a millisecond on a 192 x 64 float64 weight (35 us
with one). On the 2-layer GRU keyword spotter (1,093 MinMax observers, 64 samples, one
thread) the calibration's CPU time falls by about a quarter.

Within ``gathered_min_max(prepared)`` an observer of exactly those two classes observes a
tensor once while it is the same object at the same version (a weight); a per-tensor
observer keeps each run's ``aminmax`` and folds their extremes into its buffers on exit.
A minimum or maximum does not depend on the order it is taken in, so the buffers end
bit for bit as the observers' own forward leaves them (NaN included: it propagates
through both). Subclasses (``CalibrationObserver``, masked observers) observe as they
always do.
"""

from __future__ import annotations

import contextlib

import torch
from torchao.quantization.pt2e.observer import MinMaxObserver, PerChannelMinMaxObserver

__all__ = ["gathered_min_max"]


class _Gathering:
    """The stand-in ``forward`` of one observer."""

    def __init__(self, observer: torch.nn.Module):
        self.observer = observer
        self.last: tuple | None = None  # (tensor, version) observed last
        self.lows: list[torch.Tensor] = []
        self.highs: list[torch.Tensor] = []

    def seen(self, x: torch.Tensor) -> bool:
        if self.last is not None and x is self.last[0] and x._version == self.last[1]:
            return True
        self.last = (x, x._version)
        return False

    def per_tensor(self, x_orig: torch.Tensor) -> torch.Tensor:
        if self.seen(x_orig) or x_orig.numel() == 0:
            return x_orig
        low, high = torch.aminmax(x_orig.detach().to(self.observer.min_val.dtype))
        self.lows.append(low)
        self.highs.append(high)
        return x_orig

    def per_channel(self, x_orig: torch.Tensor) -> torch.Tensor:
        if self.seen(x_orig):
            return x_orig
        return type(self.observer)._forward(self.observer, x_orig)

    def fold(self) -> None:
        """The gathered extremes into the observer's buffers, as its forward would have."""
        obs = self.observer
        if self.lows:
            obs.min_val.copy_(torch.min(torch.stack(self.lows).amin(), obs.min_val))
            obs.max_val.copy_(torch.max(torch.stack(self.highs).amax(), obs.max_val))
        self.lows, self.highs, self.last = [], [], None


@contextlib.contextmanager
def gathered_min_max(module: torch.nn.Module):
    """``module``'s ``MinMaxObserver`` and ``PerChannelMinMaxObserver`` submodules observe as
    the module docstring says until the block ends, their buffers then as their own
    forward would have left them. A block left by an exception leaves the observers
    with what they had folded before it (callers reset them)."""
    gathering = []
    for m in module.modules():
        if type(m) is MinMaxObserver:
            g = _Gathering(m)
            m.forward = g.per_tensor
        elif type(m) is PerChannelMinMaxObserver:
            g = _Gathering(m)
            m.forward = g.per_channel
        else:
            continue
        gathering.append(g)
    try:
        yield
        for g in gathering:
            g.fold()
    finally:
        for g in gathering:
            g.observer.__dict__.pop("forward", None)
