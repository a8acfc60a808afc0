"""ConvertBatchNormToDepthwise: exact in float, leaves the BatchNorms prepare_pt2e folds, and
through the whole flow puts a lone BatchNorm on the NPU matching the quantized reference,
without torchao tracing its QAT conv + BN patterns."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchao.quantization.pt2e import qat_utils

import mcu_npu
from helpers import as_list, calibration_set, reference_output_steps
from mcu_npu.passes.aten import ConvertBatchNormToDepthwise
from mcu_npu.flow.export import export_module

aten = torch.ops.aten
BN_TARGETS = {aten.batch_norm.default, aten._native_batch_norm_legit_no_training.default}


def random_bn(bn):
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        if bn.affine:
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-1, 1)
    return bn


def targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("module,shape,conv", [
    (lambda: random_bn(nn.BatchNorm2d(5)), (2, 5, 6, 3), aten.conv2d.default),
    (lambda: random_bn(nn.BatchNorm2d(3, affine=False)), (1, 3, 4, 4), aten.conv2d.default),
    (lambda: random_bn(nn.BatchNorm1d(6)), (2, 6, 7), aten.conv1d.default),
    (lambda: nn.Sequential(nn.ReLU(), random_bn(nn.BatchNorm1d(6))), (3, 6),
     aten.conv1d.default),
    (lambda: nn.Sequential(nn.Linear(4, 6), random_bn(nn.BatchNorm1d(5))), (2, 5, 4),
     aten.conv1d.default),  # BN on dim 1 of a 3-D linear output: nothing folds it
], ids=["bn2d", "bn2d_no_affine", "bn1d_3d", "bn1d_2d", "bn1d_after_3d_linear"])
def test_is_exact_and_leaves_one_depthwise_conv(module, shape, conv):
    torch.manual_seed(0)
    module = module().eval()
    x = torch.randn(shape)
    result = ConvertBatchNormToDepthwise()(export_module(module, (x,)))
    assert result.modified
    ops = targets(result.graph_module)
    assert not BN_TARGETS & set(ops) and ops.count(conv) == 1
    (dw,) = [n for n in result.graph_module.graph.nodes if n.target == conv]
    assert dw.args[-1] == shape[1]  # groups = channels: depthwise
    with torch.no_grad():
        expected, got = module(x), result.graph_module(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("module,shape", [
    (lambda: nn.Sequential(nn.Conv2d(3, 4, 1), random_bn(nn.BatchNorm2d(4))), (1, 3, 4, 4)),
    (lambda: nn.Sequential(nn.Linear(3, 4), random_bn(nn.BatchNorm1d(4))), (2, 3)),
    (lambda: random_bn(nn.BatchNorm3d(2)), (1, 2, 2, 2, 2)),
], ids=["after_conv", "after_linear", "bn3d"])
def test_leaves_what_prepare_folds_and_5d(module, shape):
    module = module().eval()
    result = ConvertBatchNormToDepthwise()(export_module(module, (torch.randn(shape),)))
    assert not result.modified and BN_TARGETS & set(targets(result.graph_module))


def test_leaves_training_batch_norm():
    gm = torch.export.export(random_bn(nn.BatchNorm2d(3)).train(),
                             (torch.randn(2, 3, 4, 4),)).module()
    assert not ConvertBatchNormToDepthwise()(gm).modified


@pytest.mark.parametrize("target", ["imxrt700", "corstone-300"])
def test_lone_batch_norm_runs_on_npu(target, monkeypatch):
    traced = []
    trace = qat_utils._get_aten_graph_module_for_pattern
    monkeypatch.setattr(qat_utils, "_get_aten_graph_module_for_pattern",
                        lambda *a, **k: traced.append(a) or trace(*a, **k))
    torch.manual_seed(0)
    module = random_bn(nn.BatchNorm2d(4)).eval()
    inputs = (torch.randn(1, 4, 8, 8),)
    prog = mcu_npu.compile(module, inputs, target=target,
                           calibration=calibration_set(inputs, n=4))
    assert not traced, "torchao traced its QAT conv + BatchNorm patterns"
    assert prog.report.summary["ops_on_cpu"] == 0 and len(prog.report.partitions) == 1, \
        prog.report
    expected = as_list(prog.reference(*inputs))
    got = prog.run(*inputs)
    for e, g, step in zip(expected, got, reference_output_steps(prog.reference)):
        assert g.shape == e.shape
        assert float((g - e).abs().max()) / step <= 1.0 + 1e-3
