"""The Cortex-M lowering leaves out the passes that find nothing to rewrite, and the program
it gives is the one ExecuTorch's full explicit-layout pass list gives, byte for byte.

Each model below holds one op kind that a skippable pass rewrites (and one holds none of
them); it is compiled with everything on the CPU, its Edge program taken just before the
Cortex-M lowering, lowered both ways and serialized.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from executorch.exir.pass_manager import ExportedProgramPassManager
from torch import nn

import mcu_npu
import mcu_npu.flow.lower as flow_lower
from mcu_npu.backend import cortex_m_pass_skips as skips
from mcu_npu.backend.cortex_m import CortexMLowering, _lowering_passes, _target_config, \
    cortex_m_passes
from mcu_npu.flow.serialize import to_executorch

CORE = "cortex-m55"


class _Conv(nn.Module):
    def __init__(self, act=None, conv=nn.Conv2d):
        super().__init__()
        self.conv = conv(3, 8, 3)
        self.act = act

    def forward(self, x):
        y = self.conv(x)
        return self.act(y) if self.act is not None else y


class _Fn(nn.Module):
    """A linear layer, then ``fn`` of its output."""

    def __init__(self, fn):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.fn = fn

    def forward(self, x):
        return self.fn(self.fc(x))


def _values_and_indices(result):
    return result.values + result.indices.float()


CASES = {  # name -> (model, input shape, passes that must run)
    "linear": (lambda: _Fn(lambda y: y), (2, 8), {"ReplaceQuantNodesPass"}),
    "conv2d_relu": (lambda: _Conv(torch.relu), (1, 3, 8, 8),
                    {"ActivationFusionPass", "CortexMReplaceOpsWithChannelsLastVariants",
                     "RemovePermutesAroundElementwiseOps"}),
    "conv2d_relu6": (lambda: _Conv(F.relu6), (1, 3, 8, 8), {"ActivationFusionPass"}),
    "conv2d_hardsigmoid": (lambda: _Conv(F.hardsigmoid), (1, 3, 8, 8),
                           {"ActivationFusionPass"}),
    "relu_unfused": (lambda: _Fn(lambda y: torch.relu(y) + y), (2, 8),  # two users
                     {"ActivationFusionPass", "QuantizedClampActivationPass"}),
    "clamp_unfused": (lambda: _Fn(lambda y: torch.clamp(y, -0.5, 0.5) + y), (2, 8),
                      {"ActivationFusionPass", "QuantizedClampActivationPass"}),
    "hardswish": (lambda: _Conv(F.hardswish), (1, 3, 8, 8), {"DecomposeHardswishPass"}),
    "conv1d": (lambda: _Conv(torch.relu, nn.Conv1d), (1, 3, 16),
               {"ConvertConv1dToConv2dPass", "ReplaceSqueezeAndUnsqueezeWithViewPass"}),
    "max_pool": (lambda: _Conv(lambda y: F.max_pool2d(y, 2)), (1, 3, 8, 8),
                 {"RemoveGetItemPass"}),
    "max_dim": (lambda: _Fn(lambda y: _values_and_indices(y.reshape(2, 2, 4).max(dim=1))),
                (2, 8), {"RemoveGetItemPass"}),
    "mul_scalar": (lambda: _Fn(lambda y: y * 0.5), (2, 8),  # made mul.Scalar: _scalar_mul
                   {"ReplaceScalarWithTensorArgPass"}),
    "unsqueeze": (lambda: _Fn(lambda y: y.unsqueeze(1)), (2, 8),
                  {"ReplaceSqueezeAndUnsqueezeWithViewPass"}),
    "view": (lambda: _Fn(lambda y: y.reshape(4, 4)), (2, 8),
             {"CortexMCanonicalizeViewCopyPermutePass"}),
    "permute": (lambda: _Fn(lambda y: y.reshape(2, 2, 4).permute(0, 2, 1) * 2), (2, 8),
                {"CortexMCanonicalizeViewCopyPermutePass",
                 "RemovePermutesAroundElementwiseOps"}),
}


class _FullLowering(CortexMLowering):
    """Every pass of the list, as ``CortexMPassManager.transform`` runs it."""

    def call(self, exported_program):
        from executorch.backends.cortex_m.passes.cortex_m_pass_manager import (
            CortexMPassManager,
        )
        from executorch.exir.pass_base import ExportedProgramPassResult

        lowered = CortexMPassManager(exported_program, passes=_lowering_passes(),
                                     target_config=_target_config(self.core),
                                     use_explicit_layout=True).transform()
        return ExportedProgramPassResult(lowered, True)


def _edge_before_lowering(monkeypatch, name):
    """The Edge program the compile hands to the Cortex-M lowering (NPU left out)."""
    make, shape, _ = CASES[name]
    seen = []
    lower = flow_lower.lower_to_cortex_m

    def capture(edge, core):
        seen.append(copy.deepcopy(edge))
        return lower(edge, core)

    monkeypatch.setattr(flow_lower, "lower_to_cortex_m", capture)
    torch.manual_seed(0)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    cal = [(torch.randn(shape, generator=torch.Generator().manual_seed(s)),) for s in range(2)]
    mcu_npu.compile(make().eval(), (x,), "corstone-300", calibration=cal,
                    operators_not_to_delegate=["*"])
    assert len(seen) == 1
    return _scalar_mul(seen[0]) if name == "mul_scalar" else seen[0]


def _scalar_mul(edge):
    """``edge`` with its ``mul.Tensor(x, constant)`` as ``mul.Scalar(x, 0.5)``: to_edge
    turns every ``.Scalar`` op into a ``.Tensor`` one, so no compile hands the lowering one,
    but its pass list rewrites them."""
    from executorch.exir.dialects._ops import ops as exir_ops

    program = edge.exported_program()
    mul = program.graph.find_nodes(op="call_function", target=exir_ops.edge.aten.mul.Tensor)
    assert len(mul) == 1
    mul[0].target = exir_ops.edge.aten.mul.Scalar
    mul[0].args = (mul[0].args[0], 0.5)
    program.graph.eliminate_dead_code()
    program.graph_module.recompile()
    return edge


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowering_gives_the_full_pass_lists_program(monkeypatch, name):
    edge = _edge_before_lowering(monkeypatch, name)
    ran = []
    may_change = skips.may_change

    def record(pass_cls, graph_module):
        runs = may_change(pass_cls, graph_module)
        if runs:
            ran.append(pass_cls.__name__)
        return runs

    monkeypatch.setattr(skips, "may_change", record)
    full = copy.deepcopy(edge).transform(
        ExportedProgramPassManager([_FullLowering(CORE)]))
    assert not ran  # the full list asks nothing
    lowered = copy.deepcopy(edge).transform(cortex_m_passes(CORE))

    assert to_executorch(lowered) == to_executorch(full)
    assert CASES[name][2] <= set(ran), ran
    assert {"FoldAndAnnotateQParamsPass", "AtenToCortexMPass"} <= set(ran)
    if name == "linear":  # nothing but quantize / dequantize and a linear on the CPU
        assert set(ran) == {"FoldAndAnnotateQParamsPass", "ReplaceQuantNodesPass",
                            "AtenToCortexMPass"}, ran


def test_every_pass_has_a_rule_or_always_runs():
    """A pass of the list with no match condition runs on every graph; only the two whose
    rewrites are broad (quantize/dequantize folding, the ATen -> cortex_m rewrite) are
    meant to be among those."""
    unruled = {p.__name__ for p in _lowering_passes() if p not in skips._matches()}
    assert unruled == {"FoldAndAnnotateQParamsPass", "AtenToCortexMPass"}

    class Unknown:
        pass

    assert skips.may_change(Unknown, torch.fx.symbolic_trace(nn.Identity()))
