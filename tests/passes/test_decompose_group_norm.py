"""DecomposeGroupNorm: exact in float; the pieces convert without a transpose, LiteRT runs them
within one output step of the quantized reference and Vela places them all on the U55 and
the U85; through the whole flow every op of a GroupNorm / InstanceNorm block runs on the NPU
of each target."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import mcu_npu
from helpers import calibration_set, output_step, quantized_edge, run_tflite, sqnr_db, \
    sqnr_holds
from mcu_npu.npu.ethos_u.vela_support import vela_rejections
from mcu_npu.passes.aten import DecomposeGroupNorm
from mcu_npu.flow.export import export_module
from mcu_npu.quantization.exact import run_exact
from mcu_npu.targets import get_target
from mcu_npu.tflite import convert
from mcu_npu.tflite.describe import op_names

aten = torch.ops.aten
NORMS = {aten.group_norm.default, aten.native_group_norm.default, aten.instance_norm.default}


def affine(norm):
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    return norm


class ConvNorm(nn.Module):
    """A convolution (so the norm reads a channels-last NPU tensor), then the norm."""

    def __init__(self, norm, c):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, c, 3, padding=1), norm

    def forward(self, x):
        return self.norm(self.conv(x))


# (id, module factory, input shape)
CASES = [
    ("group_norm", lambda: affine(nn.GroupNorm(2, 6)), (2, 6, 5, 7)),
    ("group_norm_one_group", lambda: affine(nn.GroupNorm(1, 8)), (1, 8, 4, 4)),
    ("group_norm_no_affine", lambda: nn.GroupNorm(3, 6, affine=False), (1, 6, 3, 5)),
    ("group_norm_1d", lambda: affine(nn.GroupNorm(3, 6)), (2, 6, 9)),
    ("instance_norm", lambda: affine(nn.InstanceNorm2d(4, affine=True)), (1, 4, 6, 6)),
    ("instance_norm_no_affine", lambda: nn.InstanceNorm2d(5), (2, 5, 4, 3)),
]
IDS = [c[0] for c in CASES]


def calls(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("name,factory,shape", CASES, ids=IDS)
def test_is_exact_and_leaves_means_and_elementwise_ops(name, factory, shape):
    module = factory().eval()
    x = torch.randn(shape) * 2.0 + 1.0
    result = DecomposeGroupNorm()(export_module(module, (x,)))
    assert result.modified
    ops = calls(result.graph_module)
    assert not NORMS & set(ops)
    assert set(ops) <= {aten.view.default, aten.mean.dim, aten.sub.Tensor, aten.mul.Tensor,
                        aten.add.Tensor, aten.rsqrt.default}
    one_channel_groups = "instance" in name
    assert ops.count(aten.mean.dim) == (2 if one_channel_groups else 4)
    with torch.no_grad():
        torch.testing.assert_close(result.graph_module(x), module(x), rtol=1e-5, atol=1e-5)


def test_leaves_instance_norm_on_running_statistics():
    norm = nn.InstanceNorm2d(3, track_running_stats=True).eval()
    gm = export_module(norm, (torch.randn(1, 3, 4, 4),))
    assert not DecomposeGroupNorm()(gm).modified


@pytest.mark.parametrize("name,factory,shape", CASES, ids=IDS)
def test_converts_without_transpose_within_one_step_and_vela_places_it(name, factory, shape):
    x = torch.randn(shape) * 2.0 + 1.0
    gm = export_module(factory().eval(), (x,))
    DecomposeGroupNorm()(gm)
    reference, edge = quantized_edge(gm, (x,), calibration_set((x,), n=4))
    model = convert(edge.exported_program())
    ops = set(op_names(model.buffer))
    assert {"MEAN", "SUB", "MUL", "RSQRT"} <= ops and "TRANSPOSE" not in ops
    (want,), (got,), (step,) = [reference(x)], run_tflite(model, (x,)), output_step(edge)
    assert got.shape == tuple(want.shape)
    assert np.abs(got - want.detach().numpy()).max() / step <= 1.0 + 1e-3
    for npu in ("ethos-u55-128", "ethos-u85-256"):
        assert vela_rejections(model, get_target(npu)) == {}, npu


@pytest.mark.parametrize("target", ["imxrt700", "corstone-300", "corstone-320"])
@pytest.mark.parametrize("norm", [lambda: affine(nn.GroupNorm(4, 16)),
                                  lambda: affine(nn.GroupNorm(1, 16)),
                                  lambda: affine(nn.InstanceNorm2d(16, affine=True))],
                         ids=["groups", "one_group", "instance"])
def test_norm_block_runs_on_the_npu_within_contract(norm, target):
    """Every op on the NPU in one partition; the norm is a chain of int8 ops (a one-step
    difference in ``rsqrt`` is several in ``d * r``), so the whole-model contract holds: the
    host run's SQNR against float within 1 dB of the quantized reference's, on 8 held-out
    inputs."""
    torch.manual_seed(0)
    module = ConvNorm(norm(), 16).eval()
    x = torch.randn(1, 3, 8, 8)
    prog = mcu_npu.compile(module, (x,), target=target, calibration=calibration_set((x,)))
    placements = {o.node: o.placement for o in prog.report.ops}
    assert placements and all(p.startswith("NPU partition") for p in placements.values()), \
        prog.report
    assert prog.report.summary["partitions"] == 1, prog.report
    tests = calibration_set((x,), seed=1)
    with torch.no_grad():
        floats = torch.cat([module(*t).flatten() for t in tests])
        refs = torch.cat([run_exact(prog.reference, *t).flatten() for t in tests])
    runs = torch.cat([prog.run(*t)[0].flatten() for t in tests])
    assert sqnr_holds(sqnr_db(floats, runs), sqnr_db(floats, refs))
