"""Causal sequence models for the sequence-to-stream conversion (``mcu_npu.streaming``) and
its benchmarks: a dilated causal TCN, a GRU keyword spotter and a depthwise-separable
temporal conv net of the shape of MLPerf Tiny's streaming wake-word task.

Both take MFCC-like frames channels first, ``(N, features, T)``, and answer on the last
frame, so each is causal: its output on frames 1..t depends on no later frame. Weights are
deterministic random (``seed``); BatchNorm statistics are set to non-trivial values.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["causal_tcn", "gru_kws", "ds_cnn_stream", "DelayRing", "example_sequence"]


class _Chomp(nn.Module):
    """Drops the last ``n`` frames: the right half of a symmetric padding (TCN spelling)."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def forward(self, x):
        return x[:, :, :-self.n].contiguous()


class _TemporalBlock(nn.Module):
    """Two dilated causal convolutions with a residual; the first is left-padded with
    ``F.pad``, the second padded symmetrically and chomped (both common spellings)."""

    def __init__(self, cin: int, cout: int, k: int, dilation: int):
        super().__init__()
        self.pad = (k - 1) * dilation
        self.conv1 = nn.Conv1d(cin, cout, k, dilation=dilation)
        self.conv2 = nn.Conv1d(cout, cout, k, padding=self.pad, dilation=dilation)
        self.chomp = _Chomp(self.pad)
        self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        y = F.relu(self.conv1(F.pad(x, (self.pad, 0))))
        y = F.relu(self.chomp(self.conv2(y)))
        return F.relu(y + (x if self.down is None else self.down(x)))


class CausalTCN(nn.Module):
    """Dilated causal TCN (dilations 1, 2, 4) with a linear head on the last frame."""

    def __init__(self, features: int = 10, channels: int = 24, classes: int = 12, k: int = 3):
        super().__init__()
        self.blocks = nn.Sequential(*(
            _TemporalBlock(features if i == 0 else channels, channels, k, 2 ** i)
            for i in range(3)))
        self.head = nn.Linear(channels, classes)

    def forward(self, x):  # (N, features, T)
        return self.head(self.blocks(x)[:, :, -1])


class GruKWS(nn.Module):
    """Keyword spotter: causal conv front-end (``nn.ConstantPad1d`` + ``Conv1d`` + BatchNorm),
    a ``batch_first`` two-layer GRU, a linear head on the last step."""

    def __init__(self, features: int = 10, channels: int = 16, hidden: int = 32,
                 classes: int = 12):
        super().__init__()
        self.front = nn.Sequential(nn.ConstantPad1d((2, 0), 0.0),
                                   nn.Conv1d(features, channels, 3, bias=False),
                                   nn.BatchNorm1d(channels), nn.ReLU())
        self.gru = nn.GRU(channels, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):  # (N, features, T)
        out, _ = self.gru(self.front(x).transpose(1, 2))
        return self.head(out[:, -1])


class DSCNNStream(nn.Module):
    """A wake-word detector as a causal 1-D depthwise-separable conv net over 40 log-mel
    features per frame: a causal conv front-end, ``blocks`` depthwise (kernel 3, growing
    dilation, left-padded) + pointwise blocks with BatchNorm and ReLU, the mean over time
    and a linear head (a keyword, or not)."""

    def __init__(self, features: int = 40, channels: int = 64, blocks: int = 4,
                 classes: int = 3):
        super().__init__()
        self.front = nn.Sequential(nn.ConstantPad1d((2, 0), 0.0),
                                   nn.Conv1d(features, channels, 3, bias=False),
                                   nn.BatchNorm1d(channels), nn.ReLU())
        layers = []
        for i in range(blocks):
            d = 2 ** i
            layers += [nn.ConstantPad1d((2 * d, 0), 0.0),
                       nn.Conv1d(channels, channels, 3, dilation=d, groups=channels,
                                 bias=False),
                       nn.BatchNorm1d(channels), nn.ReLU(),
                       nn.Conv1d(channels, channels, 1, bias=False),
                       nn.BatchNorm1d(channels), nn.ReLU()]
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Linear(channels, classes)

    def forward(self, x):  # (N, features, T)
        return self.head(self.blocks(self.front(x)).mean(-1))


class DelayRing(nn.Module):
    """Returns the frame it was given ``length`` calls ago: every value goes round the
    ring's loop (read, shifted, written back) ``length`` times before it comes out, which
    shows whether a program's state is requantized on its way round."""

    def __init__(self, channels: int = 8, length: int = 4):
        super().__init__()
        self.register_buffer("ring", torch.zeros(1, channels, length))

    def forward(self, x):  # (1, channels, 1)
        window = torch.cat([self.ring, x], dim=2)
        self.ring.copy_(window[:, :, 1:])
        return window[:, :, :1]


def _settle(model: nn.Module, seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed + 1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model.eval()


def causal_tcn(features: int = 10, channels: int = 24, classes: int = 12,
               seed: int = 0) -> nn.Module:
    """A causal TCN (three residual blocks, dilations 1, 2, 4, receptive field 29 frames)
    taking ``(N, features, T)``, answering ``(N, classes)`` on the last frame."""
    torch.manual_seed(seed)
    return _settle(CausalTCN(features, channels, classes), seed)


def gru_kws(features: int = 10, channels: int = 16, hidden: int = 32, classes: int = 12,
            seed: int = 0) -> nn.Module:
    """A GRU keyword spotter taking ``(N, features, T)``, answering ``(N, classes)`` on the
    last frame."""
    torch.manual_seed(seed)
    with torch.no_grad():
        return _settle(GruKWS(features, channels, hidden, classes), seed)


def ds_cnn_stream(features: int = 40, channels: int = 64, blocks: int = 4, classes: int = 3,
                  seed: int = 0) -> nn.Module:
    """A depthwise-separable temporal conv wake-word detector taking ``(N, features, T)``
    log-mel frames and answering ``(N, classes)`` from the mean over all frames so far."""
    torch.manual_seed(seed)
    return _settle(DSCNNStream(features, channels, blocks, classes), seed)


def example_sequence(features: int = 10, frames: int = 49, seed: int = 0) -> tuple:
    """Example inputs for both models: ``(N=1, features, frames)`` standard normal."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, features, frames, generator=g),)
