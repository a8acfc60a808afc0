"""Signal models written as people write them run wholly on the NPU in one partition and hold
the numerics contract over all outputs of 8 held-out inputs: a 1-D CNN classifier with every
1-D spelling (dilated, depthwise, grouped and causally padded Conv1d, BatchNorm1d,
InstanceNorm1d, MaxPool1d, AvgPool1d, adaptive average and max pooling, mean and max over
time, squeeze) on the three SoC targets; a statistics-pooling speaker-embedding net (mean and
standard deviation over time) and a ConvNeXt-V2 style global response normalisation block
on corstone-320."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mcu_npu
from helpers import sqnr_holds
from mcu_npu.report import Kernel
from zoo.public import measure, settle_batch_norm


class Cnn1d(nn.Module):
    """A 1-D CNN classifier over (N, 6, 64) multivariate series."""

    def __init__(self, channels: int = 6, classes: int = 5):
        super().__init__()
        self.c1, self.b1 = nn.Conv1d(channels, 16, 5, padding=2), nn.BatchNorm1d(16)
        self.p1 = nn.MaxPool1d(3, stride=2, padding=1)
        self.dw = nn.Conv1d(16, 16, 3, padding=2, dilation=2, groups=16)
        self.inorm = nn.InstanceNorm1d(16, affine=True)
        self.grouped, self.b2 = nn.Conv1d(16, 32, 3, groups=4), nn.BatchNorm1d(32)
        self.p2 = nn.AvgPool1d(2)
        self.causal = nn.Conv1d(32, 32, 3, padding=2)
        self.amax, self.aavg = nn.AdaptiveMaxPool1d(4), nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(3 * 32, classes)

    def forward(self, x):
        x = self.p1(torch.relu(self.b1(self.c1(x))))
        x = self.inorm(self.dw(x))
        x = self.p2(self.b2(torch.relu(self.grouped(F.pad(x, (2, 0))))))  # causal: pad left
        x = self.amax(torch.relu(self.causal(x))[..., :-2])               # causal: trim right
        pooled = [self.aavg(x).squeeze(-1), x.mean(-1), x.amax(-1)]
        return self.fc(torch.cat(pooled, 1))


class StatsPooling(nn.Module):
    """A speaker-embedding net over (N, 12, 50) features: Conv1d + ReLU + BatchNorm1d blocks,
    then the mean and standard deviation over time, then the embedding."""

    def __init__(self, features: int = 12, embedding: int = 8):
        super().__init__()
        self.c1, self.b1 = nn.Conv1d(features, 16, 5, padding=2), nn.BatchNorm1d(16)
        self.c2, self.b2 = nn.Conv1d(16, 16, 3, padding=2, dilation=2), nn.BatchNorm1d(16)
        self.c3, self.b3 = nn.Conv1d(16, 24, 1), nn.BatchNorm1d(24)
        self.fc = nn.Linear(48, embedding)

    def forward(self, x):
        x = self.b1(torch.relu(self.c1(x)))
        x = self.b2(torch.relu(self.c2(x)))
        x = self.b3(torch.relu(self.c3(x)))
        mean = x.mean(dim=2)
        var = (x - mean.unsqueeze(2)).pow(2).sum(dim=2) / (x.shape[2] - 1)
        std = torch.sqrt(var.clamp(min=1e-5))
        return self.fc(torch.cat([mean, std], dim=1))


class GrnBlock(nn.Module):
    """ConvNeXt-V2's block core on (N, 3, 8, 8): depthwise conv, pointwise expansion, GELU,
    global response normalisation (L2 norm over space written with pow / sum / sqrt, divided
    by its mean over channels plus eps), pointwise projection, residual."""

    def __init__(self, c: int = 16):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.up, self.down = nn.Conv2d(c, 2 * c, 1), nn.Conv2d(2 * c, c, 1)
        self.gamma = nn.Parameter(torch.linspace(-0.3, 0.3, 2 * c).view(1, -1, 1, 1))
        self.beta = nn.Parameter(torch.linspace(0.2, -0.2, 2 * c).view(1, -1, 1, 1))

    def forward(self, x):
        x = self.stem(x)
        y = F.gelu(self.up(self.dw(x)))
        g = y.pow(2).sum(dim=(2, 3), keepdim=True).sqrt()
        n = g / (g.mean(dim=1, keepdim=True) + 1e-6)
        y = self.gamma * (y * n) + self.beta + y
        return x + self.down(y)


MODELS = {"cnn1d": (Cnn1d, (1, 6, 64)), "stats_pooling": (StatsPooling, (1, 12, 50)),
          "grn": (GrnBlock, (1, 3, 8, 8))}
CASES = [("cnn1d", "imxrt700"), ("cnn1d", "corstone-300"), ("cnn1d", "corstone-320"),
         ("stats_pooling", "corstone-320"), ("grn", "corstone-320")]


@functools.lru_cache(maxsize=None)
def compiled(name: str, target: str):
    """(program, ``measure``'s figures) of model ``name`` (random weights, BatchNorm
    statistics settled on the 8 calibration samples) on ``target``."""
    torch.manual_seed(0)
    factory, shape = MODELS[name]
    model = factory()
    g = torch.Generator().manual_seed(1)
    calibration = [(torch.randn(shape, generator=g),) for _ in range(8)]
    tests = [(torch.randn(shape, generator=g),) for _ in range(8)]
    settle_batch_norm(model, torch.cat([c[0] for c in calibration]))
    prog = mcu_npu.compile(model, calibration[0], target=target, calibration=calibration)
    return prog, measure(prog, model, tests)


@pytest.mark.slow
@pytest.mark.parametrize("name,target", CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_runs_wholly_on_the_npu_in_one_partition_within_contract(name, target):
    prog, figures = compiled(name, target)
    cpu = [(o.node, o.op, o.reason) for o in prog.report.ops if o.kernel is not Kernel.NPU]
    assert not cpu, cpu
    assert prog.report.summary["partitions"] == 1, prog.report
    assert figures["finite"]
    assert sqnr_holds(figures["host_sqnr"], figures["ref_sqnr"]), figures
