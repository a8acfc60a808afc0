"""Single-operator modules shared by the converter tests and the end-to-end compile tests:
(id, module factory, input shapes). Shapes include non-multiples of 8 and batch > 1."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Fn(nn.Module):
    def __init__(self, fn, *modules):
        super().__init__()
        self.fn = fn
        self.mods = nn.ModuleList(modules)

    def forward(self, *xs):
        return self.fn(self.mods, *xs)


def fn(f):
    return Fn(lambda mods, *xs: f(*xs))


def with_mods(f, *mods):
    return Fn(f, *mods)


class ConstOperand(nn.Module):
    def __init__(self, op, shape):
        super().__init__()
        self.op = op
        self.register_buffer("c", torch.linspace(-1.5, 2.0, int(np.prod(shape))).reshape(shape))

    def forward(self, x):
        return self.op(x, self.c)


def prelu_module(channels):
    m = nn.PReLU(channels)
    with torch.no_grad():
        m.weight.copy_(torch.linspace(0.05, 0.4, channels))
    return m


# (id, module factory, input shapes)
CASES = [
    ("conv2d", lambda: nn.Conv2d(3, 5, 3), [(2, 3, 9, 7)]),
    ("conv2d_pad_same", lambda: nn.Conv2d(3, 6, 3, padding=1), [(1, 3, 10, 10)]),
    ("conv2d_stride2_pad1", lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1), [(2, 4, 11, 9)]),
    ("conv2d_pad_explicit", lambda: nn.Conv2d(3, 5, 3, padding=2), [(1, 3, 7, 6)]),
    ("conv2d_dilation", lambda: nn.Conv2d(3, 5, 3, dilation=2, padding=2), [(1, 3, 12, 11)]),
    ("conv2d_rect_nobias", lambda: nn.Conv2d(5, 7, (1, 3), bias=False), [(3, 5, 6, 9)]),
    ("conv2d_depthwise", lambda: nn.Conv2d(6, 6, 3, padding=1, groups=6), [(2, 6, 9, 9)]),
    ("conv2d_depthwise_mult2", lambda: nn.Conv2d(5, 10, 3, groups=5), [(1, 5, 8, 8)]),
    ("conv2d_grouped", lambda: nn.Conv2d(6, 9, 3, padding=1, groups=3), [(1, 6, 7, 7)]),
    ("conv1d", lambda: nn.Conv1d(5, 7, 3), [(2, 5, 13)]),
    ("conv1d_pad_stride", lambda: nn.Conv1d(4, 6, 5, stride=2, padding=2), [(1, 4, 17)]),
    ("conv_transpose2d", lambda: nn.ConvTranspose2d(4, 5, 3, stride=2), [(1, 4, 5, 6)]),
    ("conv_transpose2d_pad", lambda: nn.ConvTranspose2d(3, 6, 4, stride=2, padding=1),
     [(2, 3, 5, 5)]),
    ("conv_transpose2d_outpad", lambda: nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1,
                                                          output_padding=1), [(1, 3, 4, 5)]),
    ("conv2d_relu", lambda: nn.Sequential(nn.Conv2d(3, 5, 3), nn.ReLU()), [(2, 3, 8, 8)]),
    ("conv2d_relu6", lambda: nn.Sequential(nn.Conv2d(3, 5, 3), nn.ReLU6()), [(1, 3, 8, 8)]),
    ("conv2d_clamp", lambda: with_mods(lambda m, x: torch.clamp(m[0](x), -0.3, 0.5),
                                       nn.Conv2d(3, 5, 3)), [(1, 3, 8, 8)]),
    ("linear", lambda: nn.Linear(13, 7), [(3, 13)]),
    ("linear_3d", lambda: nn.Linear(10, 6), [(2, 5, 10)]),
    ("linear_relu", lambda: nn.Sequential(nn.Linear(12, 9), nn.ReLU()), [(4, 12)]),
    ("linear_nobias", lambda: nn.Linear(9, 5, bias=False), [(2, 9)]),
    ("mm", lambda: fn(torch.mm), [(3, 5), (5, 4)]),
    ("bmm", lambda: fn(torch.bmm), [(2, 3, 5), (2, 5, 6)]),
    ("add", lambda: fn(torch.add), [(2, 3, 5, 5), (2, 3, 5, 5)]),
    ("add_broadcast", lambda: fn(torch.add), [(2, 3, 4, 5), (1, 3, 1, 5)]),
    ("add_scalar", lambda: fn(lambda x: x + 0.75), [(2, 7)]),
    ("add_const", lambda: ConstOperand(torch.add, (1, 5)), [(3, 5)]),
    ("add_relu", lambda: fn(lambda a, b: torch.relu(a + b)), [(2, 6), (2, 6)]),
    ("sub", lambda: fn(torch.sub), [(2, 9), (2, 9)]),
    ("sub_broadcast", lambda: fn(torch.sub), [(2, 4, 3), (3,)]),
    ("mul", lambda: fn(torch.mul), [(3, 2, 5), (3, 2, 5)]),
    ("mul_scalar", lambda: fn(lambda x: x * -1.5), [(2, 11)]),
    ("mul_broadcast_4d", lambda: fn(torch.mul), [(2, 3, 4, 4), (2, 3, 1, 1)]),
    ("relu", lambda: nn.ReLU(), [(2, 3, 5)]),
    ("relu6", lambda: nn.ReLU6(), [(2, 13)]),
    ("hardtanh", lambda: nn.Hardtanh(-0.5, 0.8), [(3, 7)]),
    ("clamp", lambda: fn(lambda x: torch.clamp(x, min=-1.2, max=0.4)), [(2, 9)]),
    ("clamp_min", lambda: fn(lambda x: torch.clamp(x, min=0.2)), [(2, 9)]),
    ("leaky_relu", lambda: nn.LeakyReLU(0.1), [(2, 3, 7)]),
    ("prelu", lambda: prelu_module(3), [(2, 3, 5, 5)]),
    ("prelu_2d", lambda: prelu_module(6), [(4, 6)]),
    ("elu", lambda: nn.ELU(), [(2, 3, 7)]),
    ("elu_4d", lambda: nn.ELU(), [(1, 6, 5, 7)]),
    ("log_of_sigmoid", lambda: fn(lambda x: torch.log(torch.sigmoid(x))), [(2, 3, 7)]),  # x > 0
    ("sigmoid", lambda: nn.Sigmoid(), [(2, 3, 7)]),
    ("tanh", lambda: nn.Tanh(), [(3, 11)]),
    ("hardswish", lambda: nn.Hardswish(), [(2, 5, 3)]),
    ("hardsigmoid", lambda: nn.Hardsigmoid(), [(2, 5, 3)]),
    ("hardsigmoid_4d", lambda: nn.Hardsigmoid(), [(1, 6, 5, 7)]),
    ("softmax_last", lambda: nn.Softmax(dim=-1), [(3, 10)]),
    ("softmax_channels", lambda: nn.Softmax(dim=1), [(2, 5, 3, 3)]),
    ("max_pool2d", lambda: nn.MaxPool2d(2), [(2, 3, 8, 6)]),
    ("max_pool2d_stride_pad", lambda: nn.MaxPool2d(3, stride=2, padding=1), [(1, 5, 9, 9)]),
    ("avg_pool2d", lambda: nn.AvgPool2d(2), [(2, 3, 6, 6)]),
    ("avg_pool2d_pad", lambda: nn.AvgPool2d(3, stride=1, padding=1), [(1, 4, 7, 5)]),
    ("avg_pool2d_pad_exclude", lambda: nn.AvgPool2d(3, stride=1, padding=1,
                                                     count_include_pad=False), [(1, 4, 7, 5)]),
    ("adaptive_avg_pool2d", lambda: nn.AdaptiveAvgPool2d(1), [(2, 5, 7, 7)]),
    ("adaptive_avg_pool2d_2x2", lambda: nn.AdaptiveAvgPool2d(2), [(1, 3, 8, 6)]),
    ("mean_hw", lambda: fn(lambda x: x.mean(dim=(2, 3))), [(2, 6, 5, 5)]),
    ("mean_keepdim", lambda: fn(lambda x: x.mean(dim=-1, keepdim=True)), [(3, 4, 9)]),
    ("cat", lambda: fn(lambda a, b: torch.cat([a, b], dim=1)), [(2, 3, 5), (2, 4, 5)]),
    ("cat_4d_channels", lambda: fn(lambda a, b: torch.cat([a, b], dim=1)),
     [(1, 3, 4, 4), (1, 5, 4, 4)]),
    # a view alone is an alias of the program's input, which stays on the CPU (nothing for
    # the NPU to compute): each view case feeds an op that computes
    ("view", lambda: fn(lambda x: x.view(2, 5, 6) + 0.0), [(2, 30)]),
    ("reshape", lambda: fn(lambda x: x.reshape(-1, 4) + 0.0), [(3, 2, 6)]),
    ("flatten", lambda: fn(lambda x: torch.flatten(x, 1) + 0.0), [(2, 3, 4, 5)]),
    ("permute", lambda: fn(lambda x: x.permute(0, 2, 1) + 0.0), [(2, 5, 7)]),
    ("transpose", lambda: fn(lambda x: torch.transpose(x, 1, 3).contiguous()), [(1, 3, 4, 5)]),
    ("squeeze", lambda: fn(lambda x: x.squeeze(1) + 0.0), [(3, 1, 7)]),
    ("unsqueeze", lambda: fn(lambda x: x.unsqueeze(2) + 0.0), [(2, 5, 3)]),
    ("slice", lambda: fn(lambda x: x[:, 1:6]), [(3, 9)]),
    ("slice_step", lambda: fn(lambda x: x[:, :, ::2]), [(2, 3, 9)]),
    ("slice_4d_channels", lambda: fn(lambda x: x[:, 2:5]), [(1, 7, 4, 4)]),
    ("select", lambda: fn(lambda x: x[:, 2]), [(2, 5, 6)]),
    ("split", lambda: fn(lambda x: torch.split(x, [3, 4], dim=1)), [(2, 7, 3)]),
    ("chunk_4d", lambda: fn(lambda x: torch.chunk(x, 2, dim=1)), [(1, 6, 3, 3)]),
    ("constant_pad_nd", lambda: fn(lambda x: F.pad(x, (1, 2))), [(2, 3, 5)]),
    ("constant_pad_nd_4d", lambda: fn(lambda x: F.pad(x, (1, 1, 2, 0))), [(1, 3, 4, 5)]),
    ("constant_pad_nd_value", lambda: fn(lambda x: F.pad(x, (2, 1), value=0.5)), [(2, 6)]),
    ("upsample_bilinear2d", lambda: fn(lambda x: F.interpolate(x, scale_factor=2,
                                                               mode="bilinear")),
     [(1, 3, 5, 6)]),
    ("upsample_bilinear2d_align_corners",
     lambda: fn(lambda x: F.interpolate(x, size=(9, 11), mode="bilinear", align_corners=True)),
     [(1, 3, 5, 6)]),
    ("upsample_nearest2d", lambda: fn(lambda x: F.interpolate(x, scale_factor=2)),
     [(1, 4, 3, 5)]),
]
