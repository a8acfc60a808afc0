"""Models whose ops the NPU leaves to the CPU (Cortex-M int8 kernels or portable ones),
among them the shapes ExecuTorch's Cortex-M lowering used to crash on: ``CASES`` (name ->
(module class, input shapes)) and ``ActAfterConv``, an activation after an NPU convolution."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class UnbatchedConv1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 6, 3)

    def forward(self, x):  # x: (C, L), no batch dimension
        return torch.relu(self.conv(x))


class ConvTranspose1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose1d(4, 6, 3, stride=2)

    def forward(self, x):
        return self.up(x)


class UnbatchedPool(nn.Module):
    def forward(self, x):  # x: (C, H, W)
        return F.max_pool2d(x, 2) + F.avg_pool2d(x, 2)


class CeilModePool(nn.Module):
    """SqueezeNet's pooling: 3x3 stride 2 in ceil mode."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return F.max_pool2d(torch.relu(self.conv(x)), 3, 2, ceil_mode=True)


class SiLUHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return F.silu(self.conv(x))


class LinearOfInput(nn.Module):
    def forward(self, x, w):
        return F.linear(x, w)


class Where(nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x, x * 2)


class Bmm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        return torch.bmm(y, y.transpose(1, 2))


class CRNN(nn.Module):
    """A conv whose output is permuted and reshaped into a GRU's sequence."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.gru = nn.GRU(4 * 4, 8, batch_first=True)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):  # x: (1, 1, 4, T)
        y = torch.relu(self.conv(x))
        y = y.permute(0, 3, 1, 2).reshape(1, y.shape[3], -1)
        out, _ = self.gru(y)
        return self.fc(out[:, -1])


class RegressionHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).mean((2, 3)))


class InPlaceSums(nn.Module):
    """MobileOne's block: the branches summed in place, ``out += 0`` where a branch is absent."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Conv2d(4, 4, 1)
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.identity = nn.BatchNorm2d(4)

    def forward(self, x):
        out = self.scale(x)
        out += self.conv(x)
        out += self.identity(x)
        out += 0
        return torch.relu(out)


CASES = {
    "in_place_sums": (InPlaceSums, [(1, 4, 8, 8)]),
    "bmm": (Bmm, [(2, 5, 8)]),
    "crnn": (CRNN, [(1, 1, 4, 6)]),
    "regression_head": (RegressionHead, [(1, 3, 8, 8)]),
    "conv1d_unbatched": (UnbatchedConv1d, [(4, 16)]),
    "conv_transpose1d": (ConvTranspose1d, [(1, 4, 10)]),
    "pool_unbatched": (UnbatchedPool, [(3, 8, 8)]),
    "ceil_mode_pool": (CeilModePool, [(1, 3, 12, 12)]),
    "silu": (SiLUHead, [(1, 3, 8, 8)]),
    "linear_of_input": (LinearOfInput, [(2, 8), (4, 8)]),
    "where": (Where, [(2, 8)]),
}


class ActAfterConv(nn.Module):
    def __init__(self, act: nn.Module):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.act = act

    def forward(self, x):
        return self.act(self.conv(x)) * 0.5
