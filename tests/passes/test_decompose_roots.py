"""DecomposeRoots: every spelling of a norm, variance, standard deviation, square root and
division by them is exact in float and leaves only means, multiplications and RSQRT; after a
convolution the result converts, LiteRT runs it within one output step of the quantized
reference (a square root of a computed value holds the numerics contract instead: its input,
a MEAN, may round one step away from the reference's, and a square root's slope turns that
step into up to sqrt(max / v) / 2 output steps at a small v), and Vela places it all on the
U55 and the U85. A division by a value that is not provably positive is left alone."""

from __future__ import annotations

import operator

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import calibration_set, output_step, quantized_edge, run_tflite, sqnr_db, \
    sqnr_holds
from mcu_npu.flow.export import export_module
from mcu_npu.npu.ethos_u.vela_support import vela_rejections
from mcu_npu.passes.aten import DecomposeRoots
from mcu_npu.targets import get_target
from mcu_npu.tflite import convert
from mcu_npu.tflite.describe import op_names

aten = torch.ops.aten
LEFT = {aten.mean.dim, aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.rsqrt.default,
        aten.clamp.default, aten.squeeze.dims, aten.conv1d.default, aten.conv2d.default,
        aten.cat.default, aten.unsqueeze.default, aten.view.default, aten.permute.default,
        aten.relu.default, aten.full.default}
GONE = {aten.sqrt.default, aten.div.Tensor, aten.sum.dim_IntList, aten.pow.Tensor_Scalar,
        aten.linalg_vector_norm.default, aten.var.dim, aten.var.correction, aten.std.dim,
        aten.std.correction, aten.var_mean.correction, aten.std_mean.correction,
        aten.addcmul.default, aten.expand.default}


class AfterConv(nn.Module):
    """A convolution (so the rewrite reads an NPU tensor), then ``fn``."""

    def __init__(self, fn, rank: int):
        super().__init__()
        self.conv = (nn.Conv1d if rank == 3 else nn.Conv2d)(3, 6, 3, padding=1)
        self.fn = fn

    def forward(self, x):
        return self.fn(self.conv(x))


def stats_pooling(x):
    """Mean and standard deviation over time, the speaker-embedding way."""
    m = x.mean(dim=2)
    s = torch.sqrt((x - m.unsqueeze(2)).pow(2).mean(dim=2).clamp(min=1e-5))
    return torch.cat([m, s], 1)


def grn(x):
    """Global response normalisation (ConvNeXt-V2), channels first."""
    g = torch.sqrt(x.pow(2).sum(dim=(2, 3), keepdim=True))
    return x * (g / (g.mean(dim=1, keepdim=True) + 1e-6)) + x


def grn_timm(x):
    """timm's GlobalResponseNorm on a channels-last tensor."""
    x = x.permute(0, 2, 3, 1)
    g = x.norm(p=2, dim=(1, 2), keepdim=True)
    n = g / (g.mean(dim=-1, keepdim=True) + 1e-6)
    return x + torch.addcmul(torch.full((6,), 0.1), torch.full((6,), 0.5), x * n)


# (id, function, input shape)
CASES = [
    ("stats_pooling", stats_pooling, (1, 3, 20)),
    ("std_var", lambda x: torch.cat([x.std(-1), x.var(-1, unbiased=False)], 1), (2, 3, 16)),
    ("std_mean", lambda x: torch.cat(torch.std_mean(x, -1, keepdim=True), -1), (1, 3, 12)),
    ("normalize", lambda x: F.normalize(x, dim=1), (1, 3, 10)),
    ("div_by_norm", lambda x: x / x.norm(dim=-1, keepdim=True), (1, 3, 10)),
    ("div_by_vector_norm", lambda x: x / torch.linalg.vector_norm(x, dim=(2, 3), keepdim=True),
     (1, 3, 5, 4)),
    ("grn", grn, (1, 3, 6, 6)),
    ("grn_timm", grn_timm, (1, 3, 5, 5)),
    ("sqrt_of_relu", lambda x: torch.sqrt(torch.relu(x)), (1, 3, 12)),
    ("pow_half_sum", lambda x: (x * x).sum(-1) ** 0.5, (2, 3, 9)),
]
IDS = [c[0] for c in CASES]
ROOTS = {"stats_pooling", "std_var", "std_mean", "grn", "grn_timm", "sqrt_of_relu",
                "pow_half_sum"}
"""Cases whose output holds a square root (``v * rsqrt(v)``) of a computed value."""


def graph(fn, shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    module = AfterConv(fn, len(shape)).eval()
    return module, x, export_module(module, (x,))


@pytest.mark.parametrize("name,fn,shape", CASES, ids=IDS)
def test_is_exact_and_leaves_means_multiplies_and_rsqrt(name, fn, shape):
    module, x, gm = graph(fn, shape)
    assert DecomposeRoots()(gm).modified
    ops = {n.target for n in gm.graph.nodes if n.op == "call_function"} - {operator.getitem}
    assert aten.rsqrt.default in ops and not ops & GONE and ops <= LEFT, ops - LEFT
    with torch.no_grad():
        torch.testing.assert_close(gm(x), module(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,fn,shape", CASES, ids=IDS)
def test_converts_within_one_step_and_vela_places_it(name, fn, shape):
    _, x, gm = graph(fn, shape)
    DecomposeRoots()(gm)
    reference, edge = quantized_edge(gm, (x,), calibration_set((x,), n=4))
    model = convert(edge.exported_program())
    assert "RSQRT" in op_names(model.buffer)
    if name in ROOTS:
        tests = [t[0] for t in calibration_set((x,), seed=1)]
        with torch.no_grad():
            floats = torch.cat([gm(t).flatten() for t in tests])
            refs = torch.cat([reference(t).flatten() for t in tests])
        host = torch.cat([torch.from_numpy(run_tflite(model, (t,))[0]).flatten() for t in tests])
        assert sqnr_holds(sqnr_db(floats, host), sqnr_db(floats, refs))
    else:
        (want,), (got,), (step,) = [reference(x)], run_tflite(model, (x,)), output_step(edge)
        assert got.shape == tuple(want.shape)
        assert np.abs(got - want.detach().numpy()).max() / step <= 1.0 + 1e-3
    for npu in ("ethos-u55-128", "ethos-u85-256"):
        assert vela_rejections(model, get_target(npu)) == {}, npu


class _Two(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, y):
        return self.fn(x, y)


def _diff_of_norms(x, y):
    """A difference of norms (``add`` with ``alpha=-1``) plus eps: of any sign."""
    d = torch.add(x.norm(dim=-1, keepdim=True), y.norm(dim=-1, keepdim=True), alpha=-1)
    return x / (d + 1e-6)


@pytest.mark.parametrize("fn,kept", [
    (lambda x, y: x / y, aten.div.Tensor),        # y may be negative or zero
    (lambda x, y: x / (y.mean(-1, keepdim=True) + 1e-6), aten.div.Tensor),  # any sign
    (_diff_of_norms, aten.div.Tensor),
    (lambda x, y: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True),  # positive, no root
     aten.div.Tensor),
    (lambda x, y: torch.linalg.vector_norm(x, 1, dim=-1), aten.linalg_vector_norm.default),
    (lambda x, y: x[..., :1].std(-1), aten.std.dim),   # one sample: Bessel divides by 0
], ids=["any_sign", "mean_plus_eps", "difference_of_norms", "softmax_by_hand", "l1_norm",
        "std_of_one"])
def test_leaves_what_is_not_a_root_or_positive(fn, kept):
    gm = export_module(_Two(fn).eval(), (torch.randn(1, 3, 8), torch.randn(1, 3, 8)))
    assert kept in {n.target for n in gm.graph.nodes if n.op == "call_function"}
    DecomposeRoots()(gm)
    assert kept in {n.target for n in gm.graph.nodes if n.op == "call_function"}
