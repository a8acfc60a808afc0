"""ConvertDivToMul: a division by a number or a constant tensor becomes a multiplication by
its reciprocal (exact in float to 1e-5), a division by a run-time value or with a rounding
mode stays; through the whole flow a distilled head's ``(a + b) / 2`` runs on the NPU of each
target within one output step of the quantized reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import mcu_npu
from helpers import as_list, calibration_set, reference_output_steps
from mcu_npu.passes.aten import ConvertDivToMul
from mcu_npu.flow.export import export_module

aten = torch.ops.aten
TARGETS = ["imxrt700", "corstone-300", "corstone-320"]


class DivByNumber(nn.Module):
    def forward(self, x):
        return x / 3


class DivByBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor([0.5, 2.0, -4.0, 3.0]))

    def forward(self, x):
        return x / self.scale


class DivByActivation(nn.Module):
    def forward(self, x):
        return x / (x.abs() + 1)


class FloorDiv(nn.Module):
    def forward(self, x):
        return torch.div(x, 3, rounding_mode="floor")


def calls(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("cls", [DivByNumber, DivByBuffer])
def test_division_by_a_constant_is_an_exact_multiplication(cls):
    module = cls().eval()
    x = torch.randn(2, 3, 4)
    result = ConvertDivToMul()(export_module(module, (x,)))
    assert result.modified
    assert calls(result.graph_module) == [aten.mul.Tensor]
    with torch.no_grad():
        torch.testing.assert_close(result.graph_module(x), module(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", [DivByActivation, FloorDiv])
def test_division_by_a_run_time_value_or_with_rounding_stays(cls):
    gm = export_module(cls().eval(), (torch.randn(2, 4),))
    assert not ConvertDivToMul()(gm).modified


class DistilledHead(nn.Module):
    """LeViT's and EfficientFormer's head: two classifiers averaged."""

    def __init__(self):
        super().__init__()
        self.head, self.dist = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x):
        return (self.head(x) + self.dist(x)) / 2


@pytest.mark.parametrize("target", TARGETS)
def test_distilled_head_runs_on_the_npu_within_one_step(target):
    torch.manual_seed(0)
    x = torch.randn(1, 8)
    cal = calibration_set((x,), n=8)
    prog = mcu_npu.compile(DistilledHead().eval(), (x,), target=target, calibration=cal)
    assert prog.report.summary["ops_on_cpu"] == 0, prog.report
    assert "aten.mul.Tensor" in {o.op for o in prog.report.ops}
    for sample in cal:
        for e, g, step in zip(as_list(prog.reference(*sample)), prog.run(*sample),
                              reference_output_steps(prog.reference)):
            assert float((g - e).abs().max()) / step <= 1.0 + 1e-3
