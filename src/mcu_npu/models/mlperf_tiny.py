"""The four MLPerf Tiny (v1.x) reference models in PyTorch, for benchmarks and model tests.

Each factory returns ``(model.eval(), example_inputs)``. Weights are random (He-normal) but
deterministic (``seed``); every BatchNorm gets non-trivial running statistics and affine
parameters (see ``randomize_batchnorm``) so that BN folding is exercised.

- ``ds_cnn``: keyword spotting (KWS), DS-CNN on 49x10 MFCC features, 12 classes.
- ``mobilenet_v1_025``: visual wake words (VWW), MobileNetV1 alpha=0.25 on 96x96 RGB, 2 classes.
- ``resnet8``: image classification (IC), ResNet-8 on 32x32 RGB (CIFAR-10), 10 classes.
- ``fc_autoencoder``: anomaly detection (AD), the dense autoencoder on 640 features.

The references are Keras models with TF ``'same'`` padding; for stride-2 convolutions TF pads
asymmetrically (more at the bottom/right) where PyTorch pads symmetrically. The ports use the
symmetric padding that yields the same output size. The final softmax of the classifiers is
left out: the models return logits.
"""

from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["ds_cnn", "mobilenet_v1_025", "resnet8", "fc_autoencoder", "MODELS",
           "randomize_batchnorm"]


def randomize_batchnorm(model: nn.Module, example_shape, seed: int = 0,
                        batch: int = 32) -> nn.Module:
    """Put every BatchNorm layer in a realistic, non-trivial state.

    The affine weight (U(0.5, 1)) and shift (N(1, 0.5)) are set first; the running statistics
    are then measured on one batch of random inputs (as training leaves them: each layer's
    input normalized) and perturbed per channel (mean by 0.1 std, variance by U(0.75, 1.25)),
    so folding yields per-channel scales and shifts that all differ. The statistics are
    measured in float64, so the model is the same on every host. Shifts centred at 1 keep
    most ReLUs active, like a trained network's well-conditioned state: centred at 0, a random
    deep network is chaotic (MobileNet turns a 40 dB input perturbation into a ~14 dB output
    one) and int8 comparisons would drown in that noise.
    """
    g = torch.Generator().manual_seed(seed)
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for m in norms:
            n = m.num_features
            m.weight.copy_(torch.rand(n, generator=g) * 0.5 + 0.5)
            m.bias.copy_(torch.randn(n, generator=g) * 0.5 + 1.0)
            m.reset_running_stats()
            m.momentum = None  # cumulative average: one batch gives its exact statistics
        # The statistics come from a float64 pass, rounded once to float32: a float32 pass
        # sums in the order of the host's conv kernels (oneDNN's AVX2 and AVX-512 code
        # differ), which changes the running statistics, so the model, in their last bits
        # and, through the quantization ranges, every quantized result downstream.
        model.double().train()
        model(torch.randn(batch, *example_shape[1:], generator=g).double())
        model.float().eval()
        for m in norms:
            n = m.num_features
            std = m.running_var.sqrt()
            m.running_mean.add_(torch.randn(n, generator=g) * 0.1 * std)
            m.running_var.mul_(torch.rand(n, generator=g) * 0.5 + 0.75)
            m.momentum = 0.1
    return model


def _init(model: nn.Module, example_shape, seed: int) -> nn.Module:
    """He-normal weights (as the Keras references use), small random biases, BN statistics."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.05)
    return randomize_batchnorm(model, example_shape, seed + 1)


def _conv_bn_relu(cin, cout, kernel, stride=1, padding=0, groups=1, act=nn.ReLU):
    return [nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, groups=groups),
            nn.BatchNorm2d(cout), act()]


# -- KWS: DS-CNN --------------------------------------------------------------------------------
class DSCNN(nn.Module):
    """DS-CNN (MLPerf Tiny KWS): conv 64x(10x4)/2, 4 depthwise-separable blocks, avg pool, FC."""

    def __init__(self, num_classes: int = 12, filters: int = 64, blocks: int = 4,
                 input_hw: tuple[int, int] = (49, 10)):
        super().__init__()
        layers = _conv_bn_relu(1, filters, (10, 4), stride=2, padding=(5, 1))
        for _ in range(blocks):
            layers += _conv_bn_relu(filters, filters, 3, padding=1, groups=filters)  # depthwise
            layers += _conv_bn_relu(filters, filters, 1)  # pointwise
        self.features = nn.Sequential(*layers)
        h = (input_hw[0] + 2 * 5 - 10) // 2 + 1
        w = (input_hw[1] + 2 * 1 - 4) // 2 + 1
        self.pool = nn.AvgPool2d((h, w))
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(filters, num_classes)

    def forward(self, x):
        return self.fc(self.flatten(self.pool(self.features(x))))


def ds_cnn(seed: int = 0):
    """DS-CNN keyword spotting on a 1x1x49x10 MFCC input, 12 classes."""
    torch.manual_seed(seed)
    shape = (1, 1, 49, 10)
    model = _init(DSCNN(), shape, seed)
    return model.eval(), (torch.randn(shape, generator=torch.Generator().manual_seed(seed)),)


# -- VWW: MobileNetV1 alpha=0.25 ----------------------------------------------------------------
# (pointwise filters at alpha=1, stride of the depthwise conv) for the 13 separable blocks
MOBILENET_V1_BLOCKS = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                       (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]


class MobileNetV1(nn.Module):
    """MobileNetV1 as in the MLPerf Tiny VWW reference (ReLU; ``relu6=True`` for Keras')."""

    def __init__(self, alpha: float = 0.25, num_classes: int = 2, input_size: int = 96,
                 relu6: bool = False):
        super().__init__()
        act = nn.ReLU6 if relu6 else nn.ReLU
        c = int(32 * alpha)
        layers = _conv_bn_relu(3, c, 3, stride=2, padding=1, act=act)
        size = (input_size + 1) // 2
        for filters, stride in MOBILENET_V1_BLOCKS:
            out = int(filters * alpha)
            layers += _conv_bn_relu(c, c, 3, stride=stride, padding=1, groups=c, act=act)
            layers += _conv_bn_relu(c, out, 1, act=act)
            c = out
            size = (size + stride - 1) // stride
        self.features = nn.Sequential(*layers)
        self.pool = nn.AvgPool2d(size)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        return self.fc(self.flatten(self.pool(self.features(x))))


def mobilenet_v1_025(seed: int = 0, relu6: bool = False):
    """MobileNetV1 alpha=0.25 visual wake words on a 1x3x96x96 image, 2 classes."""
    torch.manual_seed(seed)
    shape = (1, 3, 96, 96)
    model = _init(MobileNetV1(relu6=relu6), shape, seed)
    return model.eval(), (torch.randn(shape, generator=torch.Generator().manual_seed(seed)),)


# -- IC: ResNet-8 -------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    """Two 3x3 conv + BN, a 1x1 conv shortcut when the shape changes, add, ReLU."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = (nn.Conv2d(cin, cout, 1, stride=stride)
                         if stride != 1 or cin != cout else nn.Identity())
        self.relu2 = nn.ReLU()

    def forward(self, x):
        y = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return self.relu2(torch.add(self.shortcut(x), y))


class ResNet8(nn.Module):
    """ResNet-8 (MLPerf Tiny IC): conv 16, stacks 16/32/64 (stride 1/2/2), avg pool, FC."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn_relu(3, 16, 3, padding=1))
        self.stack1 = BasicBlock(16, 16, 1)
        self.stack2 = BasicBlock(16, 32, 2)
        self.stack3 = BasicBlock(32, 64, 2)
        self.pool = nn.AvgPool2d(8)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.stack3(self.stack2(self.stack1(self.stem(x))))
        return self.fc(self.flatten(self.pool(x)))


def resnet8(seed: int = 0):
    """ResNet-8 image classification on a 1x3x32x32 image, 10 classes."""
    torch.manual_seed(seed)
    shape = (1, 3, 32, 32)
    model = _init(ResNet8(), shape, seed)
    return model.eval(), (torch.randn(shape, generator=torch.Generator().manual_seed(seed)),)


# -- AD: FC autoencoder -------------------------------------------------------------------------
class FCAutoencoder(nn.Module):
    """Dense 128 x4 (BN, ReLU), bottleneck 8 (BN, ReLU), Dense 128 x4 (BN, ReLU), Dense out."""

    def __init__(self, features: int = 640, hidden: int = 128, bottleneck: int = 8):
        super().__init__()
        widths = [features, hidden, hidden, hidden, hidden, bottleneck,
                  hidden, hidden, hidden, hidden]
        layers = []
        for cin, cout in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(cin, cout), nn.BatchNorm1d(cout), nn.ReLU()]
        layers.append(nn.Linear(hidden, features))
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


def fc_autoencoder(seed: int = 0):
    """The anomaly-detection autoencoder on a 1x640 input (5 frames x 128 mel bins)."""
    torch.manual_seed(seed)
    shape = (1, 640)
    model = _init(FCAutoencoder(), shape, seed)
    return model.eval(), (torch.randn(shape, generator=torch.Generator().manual_seed(seed)),)


MODELS = {
    "ds_cnn": ds_cnn,
    "mobilenet_v1_025": mobilenet_v1_025,
    "resnet8": resnet8,
    "fc_autoencoder": fc_autoencoder,
}
