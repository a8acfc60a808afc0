"""MLPerf-Tiny-shaped models written as a user would, independently of ``mcu_npu.models``.

``benchmarks/pte_size.py --set independent`` compiles these beside the project's own ports, so
that a size win measured on ``mcu_npu.models.mlperf_tiny`` is not a win on one way of writing
the models only. The spellings differ on purpose: plain ``nn.Sequential`` stacks built in
helper functions, ``F.relu``/``F.relu6`` in ``forward`` next to ``nn.ReLU`` modules, dropout
(an identity once exported in eval mode), pooling by ``x.mean``, ``F.adaptive_avg_pool2d``
and ``F.avg_pool2d``, flattening by ``view``/``reshape``/``torch.flatten``, the residual
add as ``+``. Shapes follow the MLPerf Tiny v1 references (KWS 49x10 MFCC, 12 classes; VWW
96x96 RGB, 2 classes; IC 32x32 RGB, 10 classes; AD 640 features).

Weights are random but deterministic: every factory seeds its own generator, and BatchNorm
running statistics and affine parameters are drawn directly (no forward pass), so the model
is the same on every host. Each factory returns ``(model.eval(), example_inputs)``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["MODELS"]


def _randomize(model: nn.Module, seed: int) -> nn.Module:
    """Uniform fan-in weights (PyTorch's default spread, from a fixed generator) and drawn
    BatchNorm states: gamma U(0.6, 1.2), beta N(0.4, 0.3), mean N(0, 0.2), var U(0.5, 2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                bound = (3.0 / m.weight[0].numel()) ** 0.5
                m.weight.copy_((torch.rand(m.weight.shape, generator=g) * 2 - 1) * bound)
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.02)
            elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                n = m.num_features
                m.weight.copy_(torch.rand(n, generator=g) * 0.6 + 0.6)
                m.bias.copy_(torch.randn(n, generator=g) * 0.3 + 0.4)
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(n, generator=g) * 1.5 + 0.5)
    return model.eval()


def _example(shape, seed: int) -> tuple[torch.Tensor]:
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed + 7)),)


# -- KWS ----------------------------------------------------------------------------------------
def _ds_block(ch: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(ch, ch, kernel_size=3, padding=1, groups=ch, bias=False),
        nn.BatchNorm2d(ch), nn.ReLU(inplace=True),
        nn.Conv2d(ch, ch, kernel_size=1, bias=False), nn.BatchNorm2d(ch), nn.ReLU(inplace=True))


class KeywordNet(nn.Module):
    """DS-CNN: conv 64 (10x4, stride 2), dropout, four depthwise-separable blocks, mean, FC."""

    def __init__(self, n_classes: int = 12, width: int = 64):
        super().__init__()
        self.conv = nn.Conv2d(1, width, kernel_size=(10, 4), stride=(2, 2), padding=(5, 1),
                              bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.drop = nn.Dropout(0.2)
        self.body = nn.Sequential(*[_ds_block(width) for _ in range(4)])
        self.head = nn.Linear(width, n_classes)

    def forward(self, mfcc):
        x = self.drop(F.relu(self.bn(self.conv(mfcc))))
        x = self.drop(self.body(x))
        return self.head(x.mean(dim=(2, 3)))


# -- IC -----------------------------------------------------------------------------------------
class Residual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.a = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.a_bn = nn.BatchNorm2d(cout)
        self.b = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b_bn = nn.BatchNorm2d(cout)
        self.skip = nn.Conv2d(cin, cout, 1, stride) if stride != 1 else None

    def forward(self, x):
        y = self.b_bn(self.b(F.relu(self.a_bn(self.a(x)))))
        return F.relu(y + (x if self.skip is None else self.skip(x)))


class CifarResNet8(nn.Module):
    """ResNet-8: conv 16, residual stacks 16/32/64 (stride 1/2/2), global pool, FC."""

    def __init__(self, n_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(16), nn.ReLU())
        self.stages = nn.Sequential(Residual(16, 16, 1), Residual(16, 32, 2),
                                    Residual(32, 64, 2))
        self.fc = nn.Linear(64, n_classes)

    def forward(self, img):
        x = F.adaptive_avg_pool2d(self.stages(self.stem(img)), 1)
        return self.fc(torch.flatten(x, 1))


# -- VWW ----------------------------------------------------------------------------------------
def _dw_sep(cin: int, cout: int, stride: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin, bias=False),
            nn.BatchNorm2d(cin), nn.ReLU6(),
            nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU6()]


class WakeWordNet(nn.Module):
    """MobileNetV1 alpha 0.25 with ReLU6: 13 depthwise-separable blocks, avg pool, FC."""

    PLAN = ((16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1), (128, 1),
            (128, 1), (128, 1), (128, 1), (256, 2), (256, 1))

    def __init__(self, n_classes: int = 2):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False),
                                   nn.BatchNorm2d(8), nn.ReLU6()]
        cin = 8
        for cout, stride in self.PLAN:
            layers += _dw_sep(cin, cout, stride)
            cin = cout
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(cin, n_classes)

    def forward(self, x):
        x = self.features(x)
        x = F.avg_pool2d(x, kernel_size=x.shape[-2:])
        return self.classifier(x.view(x.size(0), -1))


# -- AD -----------------------------------------------------------------------------------------
def _dense(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Linear(cin, cout), nn.BatchNorm1d(cout), nn.ReLU()]


def autoencoder() -> nn.Sequential:
    """640 -> 128 x4 -> 8 -> 128 x4 -> 640, BatchNorm and ReLU after each hidden layer."""
    sizes = [640, 128, 128, 128, 128, 8, 128, 128, 128, 128]
    layers: list[nn.Module] = []
    for cin, cout in zip(sizes, sizes[1:]):
        layers += _dense(cin, cout)
    return nn.Sequential(*layers, nn.Linear(128, 640))


class Reshaped(nn.Module):
    """The autoencoder fed a (1, 5, 128) frame stack, reshaped to 640 features and back."""

    def __init__(self):
        super().__init__()
        self.net = autoencoder()

    def forward(self, frames):
        return self.net(frames.reshape(frames.shape[0], -1)).reshape(frames.shape)


def kws_dscnn(seed: int = 11):
    return _randomize(KeywordNet(), seed), _example((1, 1, 49, 10), seed)


def ic_resnet8(seed: int = 12):
    return _randomize(CifarResNet8(), seed), _example((1, 3, 32, 32), seed)


def vww_mobilenet(seed: int = 13):
    return _randomize(WakeWordNet(), seed), _example((1, 3, 96, 96), seed)


def ad_autoencoder(seed: int = 14):
    return _randomize(Reshaped(), seed), _example((1, 5, 128), seed)


MODELS = {"kws_dscnn": kws_dscnn, "ic_resnet8": ic_resnet8, "vww_mobilenet": vww_mobilenet,
          "ad_autoencoder": ad_autoencoder}
