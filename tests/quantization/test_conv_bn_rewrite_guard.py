"""``upstream.patches.conv_bn_rewrites_where_they_match``: torchao's QAT conv + BatchNorm
pattern rewrites (each traces dozens of patterns with torch.export) run where a convolution
feeds a BatchNorm, and nowhere else; and the upstream names the guard swaps still exist and
are still called by name."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchao.quantization.pt2e import qat_utils, quantize_pt2e
from torchao.quantization.pt2e.quantize_pt2e import prepare_qat_pt2e

from mcu_npu.flow.export import export_module
from mcu_npu.quantization import NpuQuantizer, quantize
from mcu_npu.upstream.patches import conv_bn_rewrites_where_they_match, conv_feeds_batch_norm

aten = torch.ops.aten


@pytest.fixture
def traced(monkeypatch):
    """The patterns torchao traces (``_get_aten_graph_module_for_pattern`` calls)."""
    calls = []
    trace = qat_utils._get_aten_graph_module_for_pattern
    monkeypatch.setattr(qat_utils, "_get_aten_graph_module_for_pattern",
                        lambda *a, **k: calls.append(a) or trace(*a, **k))
    return calls


def lone_bn():
    bn = nn.BatchNorm2d(3).eval()
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    return bn


def test_upstream_calls_the_rewrites_by_module_global_name():
    assert "_fold_conv_bn_qat" in quantize_pt2e.convert_pt2e.__code__.co_names
    assert "_fuse_conv_bn_qat" in quantize_pt2e.prepare_qat_pt2e.__code__.co_names
    assert callable(qat_utils._get_aten_graph_module_for_pattern)


def test_ptq_of_a_batch_norm_no_conv_feeds_traces_no_pattern(traced):
    x = torch.randn(2, 3, 4, 4)
    model = nn.Sequential(nn.ReLU(), lone_bn()).eval()
    gm = export_module(model, (x,))
    assert not conv_feeds_batch_norm(gm.graph)
    reference = quantize(gm, (x,), [(x,)], NpuQuantizer())
    assert not traced
    assert any(n.target == aten.batch_norm.default for n in reference.graph.nodes)
    with torch.no_grad():
        torch.testing.assert_close(reference(x), model(x), rtol=0.05, atol=0.05)


def test_guard_restores_upstream_functions():
    fold, fuse = quantize_pt2e._fold_conv_bn_qat, quantize_pt2e._fuse_conv_bn_qat
    with conv_bn_rewrites_where_they_match():
        assert quantize_pt2e._fold_conv_bn_qat is not fold
    assert (quantize_pt2e._fold_conv_bn_qat, quantize_pt2e._fuse_conv_bn_qat) == (fold, fuse)


def test_qat_conv_then_batch_norm_still_rewritten(traced):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    gm = torch.export.export(model, (torch.randn(2, 3, 6, 6),)).module()
    assert conv_feeds_batch_norm(gm.graph)
    with conv_bn_rewrites_where_they_match():
        prepared = prepare_qat_pt2e(gm, NpuQuantizer(is_qat=True))
    assert traced  # the QAT fusion ran
    assert conv_feeds_batch_norm(prepared.graph)  # conv / scale -> BN: convert folds it
