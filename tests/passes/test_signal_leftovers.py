"""What signal models left on the CPU: a ``repeat`` of a run-time statistic over 100 frames
(squeeze-excite, attentive statistics pooling) or an ``expand_as`` becomes a broadcast
(``ConvertRepeatToBroadcast``), a chomp spelled ``as_strided`` becomes a slice
(``ConvertStridedViewToSlices``), a ``stack`` of a temporal conv net's skip connections a
concatenation (``StackByConcat``), each exact in float; through the flow each model runs in
one corstone-320 NPU partition within the contract. A model that calls each layer as
``layer(x, lengths=lens)`` inside ``try/except TypeError`` exports
(``upstream.patches.module_calls_unwound_on_error``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import mcu_npu
from helpers import calibration_set, sqnr_holds
from mcu_npu.flow.export import export_module
from mcu_npu.passes.aten import ConvertRepeatToBroadcast, ConvertStridedViewToSlices, \
    StackByConcat
from mcu_npu.quantization.exact import run_exact
from mcu_npu.report import Kernel
from mcu_npu.estimate.metrics import flat_outputs, sqnr_db

aten = torch.ops.aten
FRAMES = 100


class SqueezeExcite(nn.Module):
    """A channel gate from the mean over time, tiled over the 100 frames by ``repeat``."""

    def __init__(self, c=16):
        super().__init__()
        self.conv, self.fc = nn.Conv1d(c, c, 3, padding=1), nn.Conv1d(c, c, 1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        s = torch.sigmoid(self.fc(y.mean(2, keepdim=True)))
        return y * s.repeat(1, 1, FRAMES)


class AttentiveStatsPooling(nn.Module):
    """SpeechBrain's attentive statistics pooling: the mean and standard deviation over time,
    tiled over the frames and concatenated with them, weigh the frames."""

    def __init__(self, c=16):
        super().__init__()
        self.tdnn, self.att = nn.Conv1d(3 * c, 8, 1), nn.Conv1d(8, c, 1)

    def forward(self, x):
        mean = x.mean(2, keepdim=True)
        std = (x - mean).pow(2).mean(2, keepdim=True).clamp(min=1e-5).sqrt()
        context = torch.cat([x, mean.repeat(1, 1, FRAMES), std.repeat(1, 1, FRAMES)], 1)
        weights = torch.softmax(self.att(torch.tanh(self.tdnn(context))), dim=2)
        return (weights * x).sum(2)


class StridedChomp(nn.Module):
    """A causal convolution padded both sides, its last two frames cut by ``as_strided``."""

    def __init__(self):
        super().__init__()
        self.conv, self.out = nn.Conv1d(8, 8, 3, padding=2), nn.Conv1d(8, 8, 1)

    def forward(self, x):
        y = self.conv(x)
        n, c, t = y.shape
        return self.out(torch.as_strided(y, (n, c, t - 2), y.stride()))


class LengthsTried(nn.Module):
    """A speech library's layer loop: each layer is offered ``lengths`` first."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Conv1d(8, 8, 3, padding=1), nn.ReLU(),
                                     nn.Conv1d(8, 4, 1)])

    def forward(self, x, lens=None):
        for layer in self.layers:
            try:
                x = layer(x, lengths=lens)
            except TypeError:
                x = layer(x)
        return x


class GatedTcn(nn.Module):
    """A WaveNet-style temporal conv net: causal dilated convs, a gated tanh * sigmoid
    activation, residuals, the last frames of each block's skip summed over a ``stack``."""

    def __init__(self, c=16, layers=3):
        super().__init__()
        self.inp = nn.Conv1d(8, c, 1)
        self.f = nn.ModuleList(nn.Conv1d(c, 2 * c, 3, dilation=2 ** i) for i in range(layers))
        self.res = nn.ModuleList(nn.Conv1d(c, c, 1) for _ in range(layers))
        self.skip = nn.ModuleList(nn.Conv1d(c, c, 1) for _ in range(layers))
        self.out = nn.Linear(c * 8, 4)

    def forward(self, x):
        x, skips = self.inp(x), []
        for i, (f, r, s) in enumerate(zip(self.f, self.res, self.skip)):
            a, b = f(nn.functional.pad(x, (2 * 2 ** i, 0))).chunk(2, 1)
            z = torch.tanh(a) * torch.sigmoid(b)
            skips.append(s(z)[:, :, -8:])
            x = x + r(z)
        return self.out(torch.stack(skips, 0).sum(0).view(x.shape[0], -1))


class Stack(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.stack([x, 2 * x, x + 1], self.dim)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_a_stack_is_a_concatenation(dim):
    ops = _exact(StackByConcat(), Stack(dim), torch.randn(2, 3, 4))
    assert aten.stack.default not in ops and aten.cat.default in ops


def calls(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _exact(pass_, module, x):
    module.eval()
    result = pass_(export_module(module, (x,)))
    assert result.modified
    with torch.no_grad():
        torch.testing.assert_close(result.graph_module(x), module(x), rtol=1e-5, atol=1e-6)
    return calls(result.graph_module)


def test_a_repeat_an_elementwise_op_broadcasts_anyway_is_dropped():
    torch.manual_seed(0)
    ops = _exact(ConvertRepeatToBroadcast(), SqueezeExcite(), torch.randn(1, 16, FRAMES))
    assert aten.repeat.default not in ops and aten.cat.default not in ops


def test_a_repeat_into_a_concatenation_is_a_multiplication_by_ones():
    torch.manual_seed(0)
    ops = _exact(ConvertRepeatToBroadcast(), AttentiveStatsPooling(),
                 torch.randn(1, 16, FRAMES))
    assert aten.repeat.default not in ops


class TileRows(nn.Module):  # copies an axis of size 2: a tiling, no broadcast
    def forward(self, x):
        return torch.cat([x, x], 1) + x.repeat(1, 2, 1)


def test_a_repeat_of_axes_longer_than_one_stays():
    gm = export_module(TileRows().eval(), (torch.randn(1, 2, 5),))
    assert not ConvertRepeatToBroadcast()(gm).modified


class Window(nn.Module):
    def __init__(self, size, offset):
        super().__init__()
        self.size, self.offset = size, offset

    def forward(self, x):
        return torch.as_strided(x, self.size, x.stride(), self.offset) * 2


@pytest.mark.parametrize("size,offset", [((1, 3, 6), 0), ((1, 3, 6), 2), ((1, 2, 4), 9)])
def test_a_window_as_strided_is_slices(size, offset):
    ops = _exact(ConvertStridedViewToSlices(), Window(size, offset), torch.randn(1, 3, 8))
    assert aten.as_strided.default not in ops and aten.slice.Tensor in ops


def test_an_as_strided_with_other_strides_stays():
    class Overlap(nn.Module):  # overlapping frames: stride 2 over a (16,) signal
        def forward(self, x):
            return torch.as_strided(x, (7, 4), (2, 1))

    gm = export_module(Overlap().eval(), (torch.randn(16),))
    assert not ConvertStridedViewToSlices()(gm).modified


def test_a_layer_call_the_model_catches_does_not_stop_export():
    x = torch.randn(1, 8, 20)
    model = LengthsTried().eval()
    gm = export_module(model, (x,))
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("cls,shape", [(SqueezeExcite, (1, 16, FRAMES)),
                                       (AttentiveStatsPooling, (1, 16, FRAMES)),
                                       (StridedChomp, (1, 8, 32)),
                                       (GatedTcn, (1, 8, 64)),
                                       (LengthsTried, (1, 8, 20))])
def test_runs_in_one_npu_partition_on_corstone_320(cls, shape):
    torch.manual_seed(0)
    model = cls().eval()
    samples = calibration_set((torch.randn(shape),), n=8)
    prog = mcu_npu.compile(model, samples[0], target="corstone-320", calibration=samples)
    cpu = [(o.op, o.reason) for o in prog.report.ops if o.kernel is not Kernel.NPU]
    assert not cpu and prog.report.summary["partitions"] == 1, cpu
    tests = calibration_set((torch.randn(shape),), n=8, seed=7)
    got, want, ref = [], [], []
    with torch.no_grad():
        for t in tests:
            want += flat_outputs(model(*t))
            got += flat_outputs(prog.run(*t))
            ref += flat_outputs(run_exact(prog.reference, *t))
    want, got, ref = torch.cat(want), torch.cat(got), torch.cat(ref)
    assert sqnr_holds(sqnr_db(want, got), sqnr_db(want, ref))


class SeparableAttention(nn.Module):
    """MobileViT-v2's separable self-attention: a context vector ``expand_as`` the values."""

    def __init__(self, c=16):
        super().__init__()
        self.qkv, self.out = nn.Conv2d(c, 1 + 2 * c, 1), nn.Conv2d(c, c, 1)
        self.c = c

    def forward(self, x):  # x: (N, C, P, T)
        q, k, v = self.qkv(x).split([1, self.c, self.c], dim=1)
        context = (k * torch.softmax(q, dim=-1)).sum(dim=-1, keepdim=True)
        return self.out(torch.relu(v) * context.expand_as(v))


class ExpandedIntoCat(nn.Module):
    def forward(self, x):  # x: (N, C, T); the mean over time beside each frame
        return torch.cat([x, x.mean(2, keepdim=True).expand(-1, -1, x.shape[2])], 1)


@pytest.mark.parametrize("cls,shape", [(SeparableAttention, (1, 16, 4, 9)),
                                       (ExpandedIntoCat, (1, 4, 10))])
def test_an_expand_is_a_broadcast(cls, shape):
    torch.manual_seed(0)
    ops = _exact(ConvertRepeatToBroadcast(), cls(), torch.randn(shape))
    assert aten.expand.default not in ops


@pytest.mark.slow
def test_separable_attention_runs_in_one_neutron_partition():
    """MobileViT-v2's attention on imxrt700: its expand_as ran as a portable kernel."""
    torch.manual_seed(0)
    model = SeparableAttention().eval()
    samples = calibration_set((torch.randn(1, 16, 4, 9),), n=8)
    prog = mcu_npu.compile(model, samples[0], target="imxrt700", calibration=samples)
    cpu = [(o.op, o.reason) for o in prog.report.ops if o.kernel is not Kernel.NPU]
    assert not cpu and prog.report.summary["partitions"] == 1, cpu
