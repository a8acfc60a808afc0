"""Biosignal and speech model shapes run wholly on the Ethos-U85 (corstone-320), in one
partition, within the numerics contract over all outputs of 8 held-out inputs:

- an EEGNet-like temporal conv net: a montage (channels picked by a constant index), a wide
  temporal (1, 32) convolution, depthwise spatial filter, BatchNorm, ELU, (1, 4) average
  pooling, dropout, separable convolution, a linear head;
- a gated temporal block: a reflect-padded input convolution, dilated conv1d,
  tanh(x) * sigmoid(x) gate, residual, skips concatenated, GELU, a GLU, a conditioning vector repeated over channels, and log-probabilities
  per time step (log_softmax, as a CTC head);
- an inception-style 1-D net: parallel Conv1d with kernels 64, 32 and 16 and 'same' padding
  (even kernels: one more pad after than before), cat, temporal mean, linear;
- a 1-D U-Net over a 2 x 960 signal: strided convolutions down, a transposed convolution
  and a nearest upsampling up, skips concatenated.

Random weights with settled BatchNorm statistics (``model_library.settle_batch_norm``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mcu_npu
from helpers import sqnr_holds
from model_library import measure, settle_batch_norm


class EEGNetLike(nn.Module):
    def __init__(self, chans=4, k=32, f1=4, depth=2, f2=8, classes=3):
        super().__init__()
        self.register_buffer("montage", torch.tensor([2, 0, 3, 1]))
        self.temporal = nn.Conv2d(1, f1, (1, k), padding=(0, k // 2), bias=False)
        self.bn1 = nn.BatchNorm2d(f1)
        self.spatial = nn.Conv2d(f1, f1 * depth, (chans, 1), groups=f1, bias=False)
        self.bn2 = nn.BatchNorm2d(f1 * depth)
        self.pool1, self.pool2 = nn.AvgPool2d((1, 4)), nn.AvgPool2d((1, 8))
        self.drop = nn.Dropout(0.25)
        self.depthwise = nn.Conv2d(f1 * depth, f1 * depth, (1, 16), padding=(0, 8),
                                   groups=f1 * depth, bias=False)
        self.pointwise = nn.Conv2d(f1 * depth, f2, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(f2)
        self.fc = nn.Linear(f2 * 4, classes)  # 128 samples: 129, 32, 33, then 4 steps

    def forward(self, x):  # (N, 1, chans, samples)
        x = self.bn1(self.temporal(x[:, :, self.montage]))
        x = self.drop(self.pool1(F.elu(self.bn2(self.spatial(x)))))
        x = self.drop(self.pool2(F.elu(self.bn3(self.pointwise(self.depthwise(x))))))
        return self.fc(x.flatten(1))


class GatedTemporal(nn.Module):
    def __init__(self, ch=8, blocks=2, classes=3):
        super().__init__()
        self.inp = nn.Conv1d(2, ch, 3, padding=1, padding_mode="reflect")
        self.filt = nn.ModuleList(nn.Conv1d(ch, ch, 3, padding=2 ** i, dilation=2 ** i)
                                  for i in range(blocks))
        self.gate = nn.ModuleList(nn.Conv1d(ch, ch, 3, padding=2 ** i, dilation=2 ** i)
                                  for i in range(blocks))
        self.res = nn.ModuleList(nn.Conv1d(ch, ch, 1) for _ in range(blocks))
        self.cond = nn.Parameter(torch.randn(1, 1, 64) * 0.1)
        self.out = nn.Conv1d(ch * blocks, 2 * classes, 1)

    def forward(self, x):  # (N, 2, 64)
        x = self.inp(x) + self.cond.repeat(1, self.filt[0].in_channels, 1) * x[:, :1]
        skips = []
        for f, g, r in zip(self.filt, self.gate, self.res):
            h = torch.tanh(f(x)) * torch.sigmoid(g(x))
            skips.append(h)
            x = x + r(h)
        y = F.glu(self.out(F.gelu(torch.cat(skips, 1))), dim=1)
        return F.log_softmax(y, dim=1)  # per time step


class InceptionTime1d(nn.Module):
    def __init__(self, cin=2, ch=4, classes=3):
        super().__init__()
        self.bottleneck = nn.Conv1d(cin, ch, 1, bias=False)
        self.branches = nn.ModuleList(nn.Conv1d(ch, ch, k, padding="same", bias=False)
                                      for k in (64, 32, 16))
        self.shortcut = nn.Conv1d(cin, ch, 1, bias=False)
        self.bn = nn.BatchNorm1d(4 * ch)
        self.fc = nn.Linear(4 * ch, classes)

    def forward(self, x):  # (N, 2, 128)
        b = self.bottleneck(x)
        y = torch.cat([c(b) for c in self.branches] + [self.shortcut(x)], 1)
        return self.fc(F.relu(self.bn(y)).mean(-1))


class UNet1d(nn.Module):
    def __init__(self, ch=4, k=5):
        super().__init__()
        conv = lambda i, o, s=1: nn.Conv1d(i, o, k, stride=s, padding=k // 2)  # noqa: E731
        self.enc, self.down1, self.down2 = conv(2, ch), conv(ch, 2 * ch, 2), conv(2 * ch, 4 * ch, 2)
        self.up2 = nn.ConvTranspose1d(4 * ch, 2 * ch, 4, stride=2, padding=1)
        self.dec2, self.up1 = conv(4 * ch, 2 * ch), nn.Conv1d(2 * ch, ch, 1)
        self.dec1, self.out = conv(2 * ch, ch), nn.Conv1d(ch, 2, 1)

    def forward(self, x):  # (N, 2, 960)
        a = F.relu(self.enc(x))
        b = F.relu(self.down1(a))
        y = F.relu(self.dec2(torch.cat([self.up2(F.relu(self.down2(b))), b], 1)))
        y = self.up1(F.interpolate(y, scale_factor=2, mode="nearest"))
        return self.out(F.relu(self.dec1(torch.cat([y, a], 1))))


MODELS = {"eegnet": (EEGNetLike, (1, 1, 4, 128)), "gated": (GatedTemporal, (1, 2, 64)),
          "inception": (InceptionTime1d, (1, 2, 128)), "unet": (UNet1d, (1, 2, 960))}


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_signal_model_runs_in_one_npu_partition_within_contract(name):
    cls, shape = MODELS[name]
    torch.manual_seed(0)
    model = cls().eval()
    g = torch.Generator().manual_seed(1)
    settle_batch_norm(model, torch.randn((16,) + shape[1:], generator=g))
    calibration = [(torch.randn(shape, generator=g),) for _ in range(8)]
    tests = [(torch.randn(shape, generator=g),) for _ in range(8)]
    prog = mcu_npu.compile(model, calibration[0], target="corstone-320", calibration=calibration)
    s = prog.report.summary
    cpu = [(o.node, o.op, o.reason) for o in prog.report.ops if o.kernel.name != "NPU"]
    assert not cpu and s["partitions"] == 1, (s["partitions"], cpu)
    figures = measure(prog, model, tests)
    assert figures["finite"] and sqnr_holds(figures["host_sqnr"], figures["ref_sqnr"]), figures
    print(name, f"{s['ops_on_npu']}/{s['ops_total']}", s["partitions"], figures)
