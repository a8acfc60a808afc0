"""The Cortex-M lowering leaves out the passes that find nothing to rewrite, and the program
it gives is the one ExecuTorch's full explicit-layout pass list gives, byte for byte.

The models below hold between them every op kind a skippable pass rewrites (and one holds
none of them); each is compiled with everything on the CPU, its Edge program taken just
before the Cortex-M lowering, lowered both ways and serialized.
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
from mcu_npu.passes.edge.order import CORTEX_M_SPLICE, Splice, spliced

CORE = "cortex-m55"


class _Convs(nn.Module):
    """Convolutions with each activation the lowering fuses or decomposes, then max
    pooling."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.c3, self.c4 = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = F.hardswish(self.c2(torch.relu(self.c1(x))))
        return F.max_pool2d(F.hardsigmoid(self.c4(F.relu6(self.c3(y)))), 2)


class _Conv1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 8, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))


class _Fn(nn.Module):
    """A linear layer, then ``fn`` of its output."""

    def __init__(self, fn):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.fn = fn

    def forward(self, x):
        return self.fn(self.fc(x))


def _shapes_and_clamps(y):
    """Activations with a second reader (not fused), ``max.dim``, unsqueeze, view and
    permute."""
    y = torch.relu(y) + y
    y = torch.clamp(y, -0.5, 0.5) + y
    top = y.reshape(2, 2, 4).max(dim=1)
    z = (top.values + top.indices.float()).reshape(8).unsqueeze(0)
    return z.reshape(2, 2, 2).permute(0, 2, 1) * 2


CASES = {  # name -> (model, input shape, passes that must run)
    "linear": (lambda: _Fn(lambda y: y), (2, 8), {"ReplaceQuantNodesPass"}),
    "convolutions": (_Convs, (1, 3, 8, 8),
                     {"FuseActivations", "CortexMReplaceOpsWithChannelsLastVariants",
                      "RemovePermutesAroundElementwiseOps", "DecomposeHardswishPass",
                      "RemoveGetItemPass"}),
    "conv1d": (_Conv1d, (1, 3, 16),
               {"ConvertConv1dToConv2dPass", "ReplaceSqueezeAndUnsqueezeWithViewPass"}),
    "shapes": (lambda: _Fn(_shapes_and_clamps), (2, 8),
               {"FuseActivations", "ClampQuantizedActivations", "RemoveGetItemPass",
                "ReplaceSqueezeAndUnsqueezeWithViewPass",
                "CortexMCanonicalizeViewCopyPermutePass",
                "RemovePermutesAroundElementwiseOps"}),
    "mul_scalar": (lambda: _Fn(lambda y: y * 0.5), (2, 8),  # made mul.Scalar: _scalar_mul
                   {"ReplaceScalarWithTensorArgPass"}),
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
        assert set(ran) == {"FoldAndAnnotateQParamsPass", "SetLinearBiasesAside",
                            "ReplaceQuantNodesPass", "RestoreLinearBiases",
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


def test_every_splice_anchor_is_once_in_the_upstream_list():
    """Each upstream pass a rule of ``CORTEX_M_SPLICE`` puts ours next to, or replaces, is in
    ExecuTorch's explicit-layout list exactly once; a list without one is refused."""
    from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager

    upstream = CortexMPassManager.explicit_layout_pass_list
    names = [p.__name__ for p in upstream]
    for rule in CORTEX_M_SPLICE:
        assert names.count(rule.anchor) == 1, f"{rule.anchor} in {names}"
    with pytest.raises(LookupError, match="AtenToCortexMPass"):
        spliced([p for p in upstream if p.__name__ != "AtenToCortexMPass"])


def test_splice_puts_ours_before_after_and_instead_of_their_anchors():
    A, B, C, Ours1, Ours2 = (type(name, (), {}) for name in ("A", "B", "C", "Ours1", "Ours2"))
    rules = (Splice("A", "after", Ours1, ""), Splice("B", "instead", Ours2, ""),
             Splice("C", "before", Ours1, ""), Splice("A", "instead", None, ""))
    assert spliced([A, B, C], rules) == [Ours1, Ours2, Ours1, C]
    names = [p.__name__ for p in _lowering_passes()]
    assert names[names.index("FoldAndAnnotateQParamsPass") + 1] == "SetLinearBiasesAside"
    assert names[names.index("AtenToCortexMPass") - 1] == "RestoreLinearBiases"
    assert {"FuseActivations", "ClampQuantizedActivations"} <= set(names)
    assert not {"ActivationFusionPass", "QuantizedClampActivationPass",
                "ValidateCortexMExplicitLayoutPass"} & set(names)
