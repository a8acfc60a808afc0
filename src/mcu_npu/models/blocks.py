"""Networks built from the blocks users bring that the MLPerf Tiny set lacks, for coverage
tests and benchmarks: a MobileNetV3-style network (hardswish, squeeze-excitation with a
hard-sigmoid gate), an EfficientNet-style network (SiLU, squeeze-excitation with a sigmoid
gate) and a two-layer TransformerEncoder classifier.

Each factory returns ``(model.eval(), example_inputs)`` with deterministic random weights
(``seed``) and BatchNorm layers in a non-trivial state (``randomize_batchnorm``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .mlperf_tiny import randomize_batchnorm

__all__ = ["mobilenet_v3_style", "efficientnet_style", "transformer_encoder_style",
           "BLOCK_MODELS"]


class SqueezeExcite(nn.Module):
    """Global mean -> 1x1 conv -> activation -> 1x1 conv -> gate, multiplied back onto the
    input (a broadcast mul over H and W)."""

    def __init__(self, channels: int, reduced: int, act: nn.Module, gate):
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)
        self.act = act
        self.gate = gate

    def forward(self, x):
        w = x.mean((2, 3), keepdim=True)
        return x * self.gate(self.expand(self.act(self.reduce(w))))


class InvertedResidual(nn.Module):
    """1x1 expand -> kxk depthwise -> optional squeeze-excitation -> 1x1 project, with a
    residual add when the shape allows (MobileNetV3's bneck, EfficientNet's MBConv)."""

    def __init__(self, cin: int, expanded: int, cout: int, kernel: int, stride: int,
                 act: type[nn.Module], se_gate=None):
        super().__init__()
        layers = []
        if expanded != cin:
            layers += [nn.Conv2d(cin, expanded, 1, bias=False), nn.BatchNorm2d(expanded), act()]
        layers += [nn.Conv2d(expanded, expanded, kernel, stride, kernel // 2, groups=expanded,
                             bias=False), nn.BatchNorm2d(expanded), act()]
        if se_gate is not None:
            layers.append(SqueezeExcite(expanded, max(8, expanded // 4), act(), se_gate))
        layers += [nn.Conv2d(expanded, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV3Style(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        hs, re = nn.Hardswish, nn.ReLU
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), hs())
        self.blocks = nn.Sequential(
            InvertedResidual(16, 16, 16, 3, 2, re, F.hardsigmoid),
            InvertedResidual(16, 72, 24, 3, 2, re),
            InvertedResidual(24, 88, 24, 3, 1, re),
            InvertedResidual(24, 96, 40, 5, 2, hs, F.hardsigmoid),
            InvertedResidual(40, 120, 40, 5, 1, hs, F.hardsigmoid),
        )
        self.head = nn.Sequential(nn.Conv2d(40, 96, 1), hs())
        self.classifier = nn.Sequential(nn.Linear(96, 128), hs(), nn.Linear(128, classes))

    def forward(self, x):
        return self.classifier(self.head(self.blocks(self.stem(x))).mean((2, 3)))


class EfficientNetStyle(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        si = nn.SiLU
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), si())
        self.blocks = nn.Sequential(
            InvertedResidual(16, 16, 8, 3, 1, si, torch.sigmoid),
            InvertedResidual(8, 32, 16, 3, 2, si, torch.sigmoid),
            InvertedResidual(16, 64, 16, 3, 1, si, torch.sigmoid),
            InvertedResidual(16, 64, 24, 5, 2, si, torch.sigmoid),
            InvertedResidual(24, 96, 24, 5, 1, si, torch.sigmoid),
        )
        self.head = nn.Sequential(nn.Conv2d(24, 64, 1, bias=False), nn.BatchNorm2d(64), si())
        self.classifier = nn.Linear(64, classes)

    def forward(self, x):
        return self.classifier(self.head(self.blocks(self.stem(x))).mean((2, 3)))


class TransformerEncoderStyle(nn.Module):
    """Token embedding -> 2 x ``nn.TransformerEncoderLayer`` -> mean over tokens -> linear."""

    def __init__(self, features: int = 16, width: int = 32, heads: int = 4, layers: int = 2,
                 classes: int = 4):
        super().__init__()
        self.embed = nn.Linear(features, width)
        layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.classifier = nn.Linear(width, classes)

    def forward(self, x):
        return self.classifier(self.encoder(self.embed(x)).mean(1))


def _build(cls, shape, seed: int, **kwargs):
    torch.manual_seed(seed)
    model = cls(**kwargs).eval()
    if any(isinstance(m, nn.BatchNorm2d) for m in model.modules()):
        randomize_batchnorm(model, shape, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    return model.eval(), (torch.randn(shape, generator=g),)


def mobilenet_v3_style(seed: int = 0):
    """MobileNetV3-small-like blocks on 64x64 RGB, 10 classes."""
    return _build(MobileNetV3Style, (1, 3, 64, 64), seed)


def efficientnet_style(seed: int = 0):
    """EfficientNet-B0-like MBConv blocks on 64x64 RGB, 10 classes."""
    return _build(EfficientNetStyle, (1, 3, 64, 64), seed)


def transformer_encoder_style(seed: int = 0):
    """Two TransformerEncoder layers (width 32, 4 heads) over 10 tokens of 16 features."""
    return _build(TransformerEncoderStyle, (1, 10, 16), seed)


BLOCK_MODELS = {
    "mobilenet_v3_style": mobilenet_v3_style,
    "efficientnet_style": efficientnet_style,
    "transformer_encoder_style": transformer_encoder_style,
}
