"""Attention and TransformerEncoder layers on the NPU.

Layers: the ATen rewrites that make them NPU ops are exact in float; layer normalization,
batch matmul between activations and softmax over a middle axis convert to TFLite graphs
that LiteRT runs within one output step of the quantized reference and that Vela places
wholly on the U55 and the U85; an ``nn.MultiheadAttention`` and a ``TransformerEncoderLayer``
(and hand-written attention) compile with every compute op on the U85, and hold the
numerics contract on every target.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mcu_npu
from helpers import (calibration_set, output_step, quantized_edge, reference_output_steps,
                     run_tflite, sqnr_close)
from mcu_npu.npu.ethos_u.vela_support import vela_rejections
from mcu_npu.passes.aten import (DecomposeLayerNorm, DecomposeMatmul, DecomposeReshape,
                                 DecomposeScaledDotProductAttention, DecomposeUnbind)
from mcu_npu.flow.export import export_module
from mcu_npu.targets import get_target
from mcu_npu.tflite import convert
from mcu_npu.tflite.describe import op_names

aten = torch.ops.aten
WIDTH, HEADS, TOKENS = 16, 2, 6


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class HandWrittenAttention(nn.Module):
    """Attention as models write it by hand: ``q @ k.transpose(-2, -1)`` on 4-D heads."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-2, -1)) * (c // HEADS) ** -0.5
        return self.proj((a.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c))


def encoder_layer():
    return nn.TransformerEncoderLayer(WIDTH, HEADS, 2 * WIDTH, dropout=0.0, batch_first=True)


class LayerNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.norm(3.0 * x + 1.0)


class Scores(nn.Module):
    """q @ k^T between two activations: a batch matmul with a transposed operand."""

    def forward(self, q, k):
        return torch.bmm(q, k.transpose(1, 2))


class SoftmaxMiddle(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _rewritten(module, inputs, passes):
    gm = export_module(module.eval(), inputs)
    for p in passes:
        assert p(gm).modified
    return gm


# --- the ATen rewrites -----------------------------------------------------------------------


def test_attention_becomes_bmm_and_softmax_exactly():
    torch.manual_seed(0)
    module, x = Attention().eval(), torch.randn(2, TOKENS, WIDTH)
    gm = _rewritten(module, (x,), [DecomposeScaledDotProductAttention(), DecomposeReshape()])
    ops = _targets(gm)
    assert aten.scaled_dot_product_attention.default not in ops
    assert ops.count(aten.bmm.default) == 2 and ops.count(aten.softmax.int) == 1
    assert aten.reshape.default not in ops  # the heads merge: contiguous + view
    torch.testing.assert_close(gm(x), module(x), rtol=1e-5, atol=1e-6)


def test_masked_attention_is_left_whole():
    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    class Masked(nn.Module):
        def forward(self, q, k, v, mask):
            return attend(q, k, v, mask)

    inputs = tuple(torch.randn(1, 2, 4, 8) for _ in range(3)) + (torch.zeros(4, 4),)
    gm = export_module(Masked(), inputs)
    assert not DecomposeScaledDotProductAttention()(gm).modified
    assert aten.scaled_dot_product_attention.default in _targets(gm)


def test_batched_matmul_becomes_bmm_exactly():
    torch.manual_seed(0)
    module, x = HandWrittenAttention().eval(), torch.randn(2, TOKENS, WIDTH)
    gm = _rewritten(module, (x,), [DecomposeUnbind(), DecomposeMatmul(), DecomposeReshape()])
    ops = _targets(gm)
    assert aten.unbind.int not in ops and ops.count(aten.select.int) == 3
    assert aten.matmul.default not in ops and ops.count(aten.bmm.default) == 2
    assert aten.reshape.default not in ops
    torch.testing.assert_close(gm(x), module(x), rtol=1e-5, atol=1e-6)


def test_unbind_becomes_selects_exactly():
    class Pieces(nn.Module):
        def forward(self, x):
            a, b, c = torch.unbind(x, 1)
            return torch.cat([c, a], -1) * b.sum()

    x = torch.randn(2, 3, 4)
    gm = _rewritten(Pieces(), (x,), [DecomposeUnbind()])
    assert aten.unbind.int not in _targets(gm) and _targets(gm).count(aten.select.int) == 3
    torch.testing.assert_close(gm(x), Pieces()(x), rtol=0, atol=0)


def test_broadcast_matmul_is_left_whole():
    class Broadcast(nn.Module):
        def forward(self, a, b):
            return a @ b

    gm = export_module(Broadcast(), (torch.randn(2, 3, 4, 5), torch.randn(1, 3, 5, 4)))
    assert not DecomposeMatmul()(gm).modified


def test_layer_norm_becomes_means_and_rsqrt_exactly():
    torch.manual_seed(0)
    module, x = LayerNorm().eval(), torch.randn(1, TOKENS, WIDTH)
    gm = _rewritten(module, (x,), [DecomposeLayerNorm()])
    ops = _targets(gm)
    assert aten.layer_norm.default not in ops
    assert ops.count(aten.mean.dim) == 2 and ops.count(aten.rsqrt.default) == 1
    torch.testing.assert_close(gm(x), module(x), rtol=1e-5, atol=1e-5)


# --- operators: LiteRT against the quantized reference, Vela's placement ------------------------


OPERATOR_CASES = [
    ("layer_norm", LayerNorm, [(1, TOKENS, WIDTH)], ["MEAN", "SUB", "MUL", "ADD", "RSQRT"]),
    ("batch_matmul", Scores, [(HEADS, TOKENS, 8), (HEADS, TOKENS, 8)], ["BATCH_MATMUL"]),
    ("softmax_middle_axis", SoftmaxMiddle, [(2, TOKENS, 5)], ["SOFTMAX"]),
]


@pytest.mark.parametrize("name,factory,shapes,expected_ops", OPERATOR_CASES,
                         ids=[c[0] for c in OPERATOR_CASES])
def test_operator_matches_reference_and_runs_on_ethos_u(name, factory, shapes, expected_ops):
    torch.manual_seed(0)
    inputs = tuple(torch.randn(s) for s in shapes)
    gm = export_module(factory().eval(), inputs)
    DecomposeLayerNorm()(gm)
    reference, edge = quantized_edge(gm, inputs, calibration_set(inputs, n=4))
    model = convert(edge.exported_program())
    assert set(expected_ops) <= set(op_names(model.buffer))
    (want,), (got,), (step,) = [reference(*inputs)], run_tflite(model, inputs), output_step(edge)
    assert got.shape == tuple(want.shape)
    assert np.abs(got - want.detach().numpy()).max() / step <= 1.0 + 1e-3
    for npu in ("ethos-u55-128", "ethos-u85-256"):
        assert vela_rejections(model, get_target(npu)) == {}, npu


# --- whole layers -------------------------------------------------------------------------------


def _compile(module, target):
    torch.manual_seed(0)
    module = module.eval()
    x = torch.randn(1, TOKENS, WIDTH, generator=torch.Generator().manual_seed(7))
    cal = calibration_set((x,), n=4, seed=1)
    return mcu_npu.compile(module, (x,), target=target, calibration=cal), cal


# (steps, fraction): that fraction of the outputs within that many output steps of the
# quantized reference, and none more than one step further. LiteRT requantizes with double
# rounding where the reference rounds once, so single ops may land one step apart; attention
# stays within one step, while the encoder layer's ~25 int8 ops in a row let a few of those
# one-step differences add up to two (measured: at most 3 % of its outputs).
MATCH = {"attention": (1, 1.0), "hand_written_attention": (1, 1.0), "encoder_layer": (1, 0.95)}


def _assert_within_contract(name, prog, cal):
    """SQNR against float within 1 dB of the reference's, no float kernel left, and the host
    run of the .pte within ``MATCH`` of the quantized reference."""
    acc = prog.report.accuracy
    assert sqnr_close(acc["sqnr_db"], acc["reference_sqnr_db"]), acc
    assert not [o for o in prog.report.ops if o.placement == "portable float kernel"]
    steps, fraction = MATCH[name]
    step = reference_output_steps(prog.reference)[0]
    for sample in cal:
        got, want = prog.run(*sample)[0], prog.reference(*sample)
        assert got.shape == want.shape
        off = (got - want).abs() / step
        assert float(off.max()) <= steps + 1 + 1e-3
        assert float((off <= steps + 1e-3).float().mean()) >= fraction


LAYERS = [("attention", Attention), ("encoder_layer", encoder_layer)]
ON_U85 = LAYERS + [("hand_written_attention", HandWrittenAttention)]


@pytest.mark.slow
@pytest.mark.parametrize("name,factory", ON_U85, ids=[n for n, _ in ON_U85])
def test_layer_runs_entirely_on_ethos_u85(name, factory):
    torch.manual_seed(0)
    prog, cal = _compile(factory(), "corstone-320")
    summary = prog.report.summary
    assert summary["ops_on_npu"] == summary["ops_total"] and summary["partitions"] == 1, \
        prog.report
    _assert_within_contract(name, prog, cal)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["corstone-300", "imxrt700"])
@pytest.mark.parametrize("name,factory", LAYERS, ids=[n for n, _ in LAYERS])
def test_layer_compiles_within_contract(name, factory, target):
    torch.manual_seed(0)
    prog, cal = _compile(factory(), target)
    assert prog.report.summary["ops_on_npu"] > 0
    _assert_within_contract(name, prog, cal)
