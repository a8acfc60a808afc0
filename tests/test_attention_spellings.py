"""Attention however it is spelled (``attention_spellings``): the ATen passes turn every
spelling into bmm / mul / add / softmax exactly, with whatever was computed from constants
folded and a mask made one saturating add; in int8 a masked weight is exactly 0; compiled for
corstone-320, softmax and both matmuls run on the NPU in one partition within the numerics
contract (and on corstone-300 and imxrt700 for a masked spelling each); a mask add left to
the CPU is as accurate."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import mcu_npu
from zoo.attention_spellings import FACTORIES, TOKENS, spelling
from helpers import (calibration_set, output_step, quantized_edge, run_tflite, sqnr_close,
                     sqnr_db, sqnr_holds)
from mcu_npu.flow.export import export_module
from mcu_npu.flow.rewrite import default_aten_passes
from mcu_npu.passes.aten import FoldConstants, SaturateAttentionMask
from mcu_npu.passes.aten.saturate_attention_mask import MASK_KEY
from mcu_npu.quantization import NpuQuantizer
from mcu_npu.targets import get_target
from mcu_npu.tflite import convert

aten = torch.ops.aten
MASKED = {"multihead_attention_padding", "sdpa_bool_mask", "sdpa_float_mask", "sdpa_causal",
          "padding_all_where", "padding_eager_masked_fill", "eager_causal_masked_fill"}
ALL_ONES = {"padding_any_masked_fill", "extended_ones_mask"}
# Left after the passes only by what the NPU does not run or the folder should have computed.
NOT_LEFT = {aten.scaled_dot_product_attention.default, aten.masked_fill.Scalar,
            aten.masked_fill_.Scalar, aten.where.self, aten.eq.Scalar, aten.any.default,
            aten.any.dim, aten.all.default, aten.expand.default, aten.index.Tensor,
            aten.bitwise_not.default, aten.zeros_like.default, aten.matmul.default}


@pytest.mark.parametrize("name", list(FACTORIES))
def test_passes_make_bmm_add_softmax_exactly(name):
    module, x = spelling(name)
    gm = export_module(module, x)
    for p in default_aten_passes(get_target("corstone-320")):
        p(gm)
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    targets = [n.target for n in calls]
    assert not NOT_LEFT & set(targets), [t for t in targets if t in NOT_LEFT]
    assert targets.count(aten.bmm.default) == 2 and targets.count(aten.softmax.int) == 1
    (softmax,) = [n for n in calls if n.target == aten.softmax.int]
    assert bool(softmax.args[0].meta.get(MASK_KEY)) == (name in MASKED)
    if name in ALL_ONES:  # the additive form of an all-ones mask is gone
        assert softmax.args[0].target == aten.mul.Tensor
    torch.testing.assert_close(gm(*x), module(*x), rtol=1e-5, atol=1e-5)


class InPlaceMask(nn.Module):
    """``nn.MultiheadAttention``'s conversion of a boolean mask: a fresh zeros tensor filled
    in place, then read."""

    def __init__(self):
        super().__init__()
        self.register_buffer("pad", torch.tensor([False, False, True]))

    def forward(self, x):
        bias = torch.zeros_like(self.pad, dtype=x.dtype)
        bias.masked_fill_(self.pad, float("-inf"))
        return x + bias


def test_in_place_fill_of_a_fresh_tensor_folds():
    x = torch.randn(2, 3)
    gm = export_module(InPlaceMask(), (x,))
    assert FoldConstants()(gm).modified
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets == [aten.add.Tensor]
    torch.testing.assert_close(gm(x), InPlaceMask()(x), rtol=0, atol=0)


class CausalWeights(nn.Module):
    """The attention weights of GPT-style causal masking: scores filled with -inf."""

    def __init__(self):
        super().__init__()
        self.register_buffer("future", ~torch.ones(TOKENS, TOKENS, dtype=torch.bool).tril())

    def forward(self, scores):
        return torch.softmax(scores.masked_fill(self.future, float("-inf")), dim=-1)


def test_masked_weights_are_exactly_zero_in_int8():
    """-inf has no int8 value: the mask add saturates masked scores to a floor far enough
    below the kept ones that their weight is 0 in the quantized reference and in LiteRT,
    while the kept weights stay within one output step of each other."""
    calibration = [(3 * s,) for (s,) in calibration_set((torch.zeros(2, TOKENS, TOKENS),))]
    x = calibration[0]
    quantizer = NpuQuantizer(aten_passes=[FoldConstants(), SaturateAttentionMask()])
    reference, edge = quantized_edge(CausalWeights().eval(), x, calibration, quantizer)
    future = CausalWeights().future
    want = reference(*x).detach()
    (got,) = run_tflite(convert(edge.exported_program()), x)
    got = torch.as_tensor(got)
    assert (want[:, future] == 0).all() and (got[:, future] == 0).all()
    (step,) = output_step(edge)
    assert float((got - want).abs().max()) <= step * (1 + 1e-3)
    assert sqnr_db(CausalWeights()(*x), want) > 25.0  # float agrees too: the rows sum to 1


@functools.cache  # a worker that ran a spelling's compile lends it to the CPU test
def _compile(name, target, not_delegated=()):
    module, x = spelling(name)
    prog = mcu_npu.compile(module, x, target=target, calibration=calibration_set(x, seed=1),
                           operators_not_to_delegate=list(not_delegated))
    tests = calibration_set(x, seed=2)
    with torch.no_grad():
        want = torch.cat([module(*t).flatten() for t in tests])
        host = torch.cat([prog.run(*t)[0].flatten() for t in tests])
        ref = torch.cat([prog.reference(*t).flatten() for t in tests])
    return prog, sqnr_db(want, host), sqnr_db(want, ref)


def _attention_on_one_npu_partition(prog) -> None:
    attention = [o for o in prog.report.ops if o.op in ("aten.bmm", "aten._softmax")]
    assert len(attention) == 3, prog.report
    assert {o.placement for o in attention} == {"NPU partition 0"}, prog.report
    assert prog.report.summary["partitions"] == 1, prog.report


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FACTORIES))
def test_spelling_runs_on_the_npu_on_corstone_320(name):
    prog, host, ref = _compile(name, "corstone-320")
    _attention_on_one_npu_partition(prog)
    assert prog.report.summary["ops_on_npu"] == prog.report.summary["ops_total"], prog.report
    assert sqnr_holds(host, ref), (host, ref)


@pytest.mark.slow
@pytest.mark.parametrize("name,target", [("sdpa_causal", "corstone-300"),
                                         ("padding_eager_masked_fill", "imxrt700")])
def test_masked_spelling_runs_on_the_npu_on_other_targets(name, target):
    prog, host, ref = _compile(name, target)
    _attention_on_one_npu_partition(prog)
    assert sqnr_holds(host, ref), (host, ref)


@pytest.mark.slow
def test_mask_add_left_to_the_cpu_saturates_too():
    """With nothing delegated, the mask add keeps its saturating quantization and the CPU
    softmax reading it shares its range: as accurate as on the NPU (its own observer would
    see the -3.4e38 scores and flatten every kept one)."""
    _, npu, _ = _compile("sdpa_causal", "corstone-320")
    prog, cpu, ref = _compile("sdpa_causal", "corstone-320", not_delegated=("*",))
    assert not [o for o in prog.report.ops if o.placement.startswith("NPU")]
    assert sqnr_holds(cpu, ref) and sqnr_close(cpu, npu), (cpu, ref, npu)
