"""ConvertPoolingTo2d: every 1-D pool, adaptive max pool and max over time or space is exact
as a 2-D pool; after a convolution (a channels-last NPU tensor) it converts with no
transpose, LiteRT runs it within one output step of the quantized reference, and Vela
places it on the U55 and the U85. Index outputs that are read and adaptive max pools of
sizes that do not divide are left alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import calibration_set, output_step, quantized_edge, run_tflite
from mcu_npu.flow.export import export_module
from mcu_npu.npu.ethos_u.vela_support import vela_rejections
from mcu_npu.passes.aten import ConvertPoolingTo2d
from mcu_npu.targets import get_target
from mcu_npu.tflite import convert
from mcu_npu.tflite.describe import op_names

aten = torch.ops.aten
POOLS_2D = {aten.max_pool2d.default, aten.avg_pool2d.default, aten.adaptive_avg_pool2d.default}


class ConvPool(nn.Module):
    """A convolution (so the pool reads the NPU's channels-last tensor), then ``pool``."""

    def __init__(self, pool, rank: int):
        super().__init__()
        conv = nn.Conv1d if rank == 3 else nn.Conv2d
        self.conv, self.pool = conv(3, 6, 3, padding=1), pool

    def forward(self, x):
        return self.pool(self.conv(x))


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


# (id, pool, input shape)
CASES = [
    ("max_pool1d", nn.MaxPool1d(2), (1, 3, 16)),
    ("max_pool1d_stride_pad", nn.MaxPool1d(3, stride=2, padding=1), (2, 3, 17)),
    ("max_pool1d_dilated_ceil", nn.MaxPool1d(2, stride=2, dilation=2, ceil_mode=True),
     (1, 3, 15)),
    ("avg_pool1d", nn.AvgPool1d(2), (1, 3, 12)),
    ("avg_pool1d_pad", nn.AvgPool1d(3, stride=1, padding=1), (1, 3, 10)),
    ("adaptive_avg_pool1d", nn.AdaptiveAvgPool1d(1), (2, 3, 9)),
    ("adaptive_avg_pool1d_4", nn.AdaptiveAvgPool1d(4), (1, 3, 12)),
    ("adaptive_max_pool1d", nn.AdaptiveMaxPool1d(3), (1, 3, 12)),
    ("adaptive_max_pool2d", nn.AdaptiveMaxPool2d((1, 2)), (1, 3, 4, 6)),
    ("amax_time", Fn(lambda x: x.amax(-1)), (2, 3, 11)),
    ("max_time_keepdim", Fn(lambda x: x.max(dim=2, keepdim=True)[0]), (1, 3, 10)),
    ("amax_hw", Fn(lambda x: torch.amax(x, dim=(2, 3))), (1, 3, 5, 4)),
    ("amax_width_keepdim", Fn(lambda x: torch.amax(x, dim=-1, keepdim=True)), (1, 3, 5, 4)),
]
IDS = [c[0] for c in CASES]
ON_CPU = {"max_pool1d_dilated_ceil"}  # TFLite MAX_POOL_2D has no dilation


def graph(pool, shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    module = ConvPool(pool, len(shape)).eval()
    return module, x, export_module(module, (x,))


@pytest.mark.parametrize("name,pool,shape", CASES, ids=IDS)
def test_is_exact_and_leaves_only_2d_pools(name, pool, shape):
    module, x, gm = graph(pool, shape)
    assert ConvertPoolingTo2d()(gm).modified
    ops = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert ops & POOLS_2D
    assert not ops & {aten.max_pool1d.default, aten.avg_pool1d.default, aten.amax.default,
                      aten.adaptive_avg_pool1d.default, aten.adaptive_max_pool1d.default,
                      aten.adaptive_max_pool2d.default, aten.max.dim}
    with torch.no_grad():
        torch.testing.assert_close(gm(x), module(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,pool,shape", [c for c in CASES if c[0] not in ON_CPU],
                         ids=[i for i in IDS if i not in ON_CPU])
def test_converts_within_one_step_and_vela_places_it(name, pool, shape):
    _, x, gm = graph(pool, shape)
    ConvertPoolingTo2d()(gm)
    reference, edge = quantized_edge(gm, (x,), calibration_set((x,), n=4))
    model = convert(edge.exported_program())
    assert "TRANSPOSE" not in op_names(model.buffer)
    (want,), (got,), (step,) = [reference(x)], run_tflite(model, (x,)), output_step(edge)
    assert got.shape == tuple(want.shape)
    assert np.abs(got - want.detach().numpy()).max() / step <= 1.0 + 1e-3
    for npu in ("ethos-u55-128", "ethos-u85-256"):
        assert vela_rejections(model, get_target(npu)) == {}, npu


@pytest.mark.parametrize("fn,shape", [
    (lambda x: F.adaptive_max_pool1d(x, 5), (1, 3, 12)),           # 12 is not a multiple of 5
    (lambda x: sum(F.adaptive_max_pool1d(x, 3, return_indices=True)), (1, 3, 12)),
    (lambda x: x.amax(1), (1, 3, 12)),                              # over channels
    (lambda x: torch.max(x, dim=-1)[1].float(), (1, 3, 12)),        # the indices are read
], ids=["not_divisible", "indices_read", "over_channels", "argmax"])
def test_leaves_what_a_2d_pool_cannot_compute(fn, shape):
    gm = export_module(Fn(fn).eval(), (torch.randn(shape),))
    assert not ConvertPoolingTo2d()(gm).modified
