"""The rewrites that put signal models' data movement and heads on the NPU, each exact in
float: ``ConvertConstantIndexToSlices`` (an index by constant indices -> slices, cat),
``ConvertPadModeToSlices`` (reflect / replicate / circular pads -> slices, cat),
``ConvertRepeatToCat`` (repeat -> cat of copies), ``ConvertUpsample1dTo2d`` (1-D resizes
as 2-D of height 1), ``DecomposeGLU`` (halves, sigmoid, mul), ``DecomposeLogSoftmax`` (log of
a softmax). Through the whole flow: ``tests/e2e/test_signal_models.py``."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mcu_npu
from helpers import as_list, calibration_set, reference_output_steps
from mcu_npu.flow.export import export_module
from mcu_npu.passes.aten import ConvertConstantIndexToSlices, ConvertPadModeToSlices, \
    ConvertRepeatToCat, ConvertUpsample1dTo2d, DecomposeGLU, DecomposeLogSoftmax

aten = torch.ops.aten


class Index(nn.Module):
    def __init__(self, axis, indices):
        super().__init__()
        self.axis = axis
        self.register_buffer("idx", torch.tensor(indices))

    def forward(self, x):
        return x[(slice(None),) * self.axis + (self.idx,)]


class Gather(nn.Module):  # two index tensors: advanced indexing over two axes
    def forward(self, x):
        return x[:, torch.tensor([0, 2]), torch.tensor([1, 3])]


def calls(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _rewritten(pass_, module, x):
    module.eval()
    result = pass_(export_module(module, (x,)))
    with torch.no_grad():
        if result.modified:
            assert torch.equal(result.graph_module(x), module(x))
    return result


@pytest.mark.parametrize("axis,indices,slices", [
    (2, list(range(0, 16, 3)), 1),        # decimation: one strided slice
    (1, [3, 1, 0, 2], 4),                 # a channel order
    (2, [4, 5, 6, 0, 1, -1], 3),          # runs, and a negative index
    (1, [2], 1)])
def test_constant_index_becomes_slices(axis, indices, slices):
    x = torch.randn(2, 4, 16)
    result = _rewritten(ConvertConstantIndexToSlices(), Index(axis, indices), x)
    assert result.modified
    targets = calls(result.graph_module)
    assert aten.index.Tensor not in targets
    assert targets.count(aten.slice.Tensor) == slices
    assert targets.count(aten.cat.default) == (slices > 1)


def test_index_by_two_tensors_stays():
    assert not _rewritten(ConvertConstantIndexToSlices(), Gather(), torch.randn(1, 4, 5)).modified


@pytest.mark.parametrize("repeats,shape,cats", [
    ((1, 3, 1), (2, 4, 5), 1), ((2, 1, 2), (2, 4, 5), 2), ((3, 1, 2), (4, 5), 2)])
def test_repeat_becomes_cat_of_copies(repeats, shape, cats):
    class Repeat(nn.Module):
        def forward(self, x):
            return x.repeat(*repeats)

    result = _rewritten(ConvertRepeatToCat(), Repeat(), torch.randn(shape))
    assert result.modified
    targets = calls(result.graph_module)
    assert aten.repeat.default not in targets and targets.count(aten.cat.default) == cats


def test_log_softmax_becomes_log_of_softmax():
    class Head(nn.Module):
        def forward(self, x):
            return F.log_softmax(x, dim=-1), torch.log_softmax(x, 1)

    module, x = Head().eval(), torch.randn(3, 7, 5) * 4
    result = DecomposeLogSoftmax()(export_module(module, (x,)))
    assert result.modified
    targets = calls(result.graph_module)
    assert targets.count(aten.log.default) == 2 and targets.count(aten.softmax.int) == 2
    assert not {aten.log_softmax.int, aten._log_softmax.default} & set(targets)
    with torch.no_grad():
        for got, want in zip(result.graph_module(x), module(x)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs", [dict(scale_factor=2, mode="nearest"),
                                    dict(size=13, mode="nearest"),
                                    dict(scale_factor=2, mode="linear"),
                                    dict(size=9, mode="linear", align_corners=True)])
def test_upsample_1d_becomes_2d_of_height_one(kwargs):
    class Up(nn.Module):
        def forward(self, x):
            return F.interpolate(x, **kwargs)

    module, x = Up().eval(), torch.randn(2, 3, 5)
    result = ConvertUpsample1dTo2d()(export_module(module, (x,)))
    assert result.modified
    targets = calls(result.graph_module)
    assert {aten.upsample_nearest2d.vec, aten.upsample_bilinear2d.vec} & set(targets)
    assert not {aten.upsample_nearest1d.vec, aten.upsample_linear1d.vec} & set(targets)
    with torch.no_grad():
        torch.testing.assert_close(result.graph_module(x), module(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pads,shape", [((2, 3), (2, 3, 8)), ((1, 1, 2, 0), (1, 2, 4, 6)),
                                        ((0, 0, 1, 2), (1, 2, 4, 6))])
def test_pad_by_mode_becomes_slices_and_cat(mode, pads, shape):
    class Pad(nn.Module):
        def forward(self, x):
            return F.pad(x, pads, mode=mode)

    result = _rewritten(ConvertPadModeToSlices(), Pad(), torch.randn(shape))
    assert result.modified
    targets = calls(result.graph_module)
    assert aten.pad.default not in targets
    assert targets.count(aten.cat.default) == sum(1 for a, b in zip(pads[::2], pads[1::2])
                                                  if a or b)


def test_constant_pad_stays():
    class Pad(nn.Module):
        def forward(self, x):
            return F.pad(x, (1, 2))

    assert not _rewritten(ConvertPadModeToSlices(), Pad(), torch.randn(1, 2, 2)).modified


@pytest.mark.parametrize("dim", [1, -1])
def test_glu_becomes_mul_by_sigmoid_of_second_half(dim):
    class Glu(nn.Module):
        def forward(self, x):
            return F.glu(x, dim)

    module, x = Glu().eval(), torch.randn(2, 6, 8)
    result = DecomposeGLU()(export_module(module, (x,)))
    assert result.modified
    targets = calls(result.graph_module)
    assert aten.glu.default not in targets
    assert [t for t in targets if t != aten.slice.Tensor] == [aten.sigmoid.default,
                                                             aten.mul.Tensor]
    with torch.no_grad():
        torch.testing.assert_close(result.graph_module(x), module(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["imxrt700", "corstone-300"])
def test_reflect_padded_input_runs_on_the_npu_within_one_step(target):
    """A reflect pad of the program's input, as slices and a concatenation of them, quantizes
    (the input read whole as well would make its shared parameters refer to themselves), runs
    on the NPU and matches the quantized reference within one output step."""
    torch.manual_seed(0)
    x = (torch.randn(1, 2, 16),)
    conv = nn.Conv1d(2, 4, 3, padding=1, padding_mode="reflect").eval()
    prog = mcu_npu.compile(conv, x, target=target, calibration=calibration_set(x))
    assert prog.report.summary["ops_on_cpu"] == 0, prog.report
    for sample in calibration_set(x, seed=1):
        for e, g, step in zip(as_list(prog.reference(*sample)), prog.run(*sample),
                              reference_output_steps(prog.reference)):
            assert float((g - e).abs().max()) / step <= 1.0 + 1e-3
