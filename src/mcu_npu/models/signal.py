"""Biosignal and speech model shapes, for model-level tests and benchmarks: an EEGNet-like
temporal conv net, a gated temporal block, an inception-style 1-D net with wide kernels and
a 1-D U-Net. Each is written the way such models are in public code (a montage by constant
index, ELU, average pooling, reflect padding, tanh * sigmoid and GLU gates, repeat,
log_softmax, 'same' padding with even kernels, transposed convolution, nearest upsampling).

Each factory returns ``(model.eval(), example_inputs)`` with deterministic random weights
(``seed``) and BatchNorm statistics settled on a batch of standard normal inputs.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["SIGNAL_MODELS", "eegnet_style", "gated_temporal_block", "inception_time_1d",
           "unet_1d"]


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


def _settled(cls, shape: tuple, seed: int):
    """``cls()`` with random weights from ``seed``; every BatchNorm holds the statistics of
    16 standard normal inputs, as training leaves them (one training-mode pass)."""
    torch.manual_seed(seed)
    model = cls()
    gen = torch.Generator().manual_seed(seed + 1)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
    model.train()
    with torch.no_grad():
        model(torch.randn((16,) + shape[1:], generator=gen))
    return model.eval(), (torch.randn(shape, generator=gen),)


def eegnet_style(seed: int = 0):
    return _settled(EEGNetLike, (1, 1, 4, 128), seed)


def gated_temporal_block(seed: int = 0):
    return _settled(GatedTemporal, (1, 2, 64), seed)


def inception_time_1d(seed: int = 0):
    return _settled(InceptionTime1d, (1, 2, 128), seed)


def unet_1d(seed: int = 0):
    return _settled(UNet1d, (1, 2, 960), seed)


SIGNAL_MODELS = {"eegnet_style": eegnet_style, "gated_temporal_block": gated_temporal_block,
                 "inception_time_1d": inception_time_1d, "unet_1d": unet_1d}
