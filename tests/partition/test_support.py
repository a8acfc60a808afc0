"""Verdicts say why a node stays on the CPU with a category; the NPU compiler's check either
settles or fails with what the user can do."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers import quantized_edge
from mcu_npu.errors import ConfigError, UnsupportedModelError
from mcu_npu.partition import NpuPartitioner, SupportAnalysis, Verdict, VerdictCategory
from mcu_npu.partition import partitioner as partitioner_module
from mcu_npu.targets import NpuKind, NpuSpec, get_target


class FloorBetweenConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return self.b(torch.floor(self.a(x)))


@pytest.fixture(scope="module")
def edge_program():
    torch.manual_seed(0)
    x = torch.randn(1, 3, 6, 6)
    _, edge = quantized_edge(FloorBetweenConvs().eval(), (x,), [(x,)])
    return edge.exported_program()


def test_categories(edge_program):
    analysis = SupportAnalysis(edge_program, get_target("imxrt700"),
                               excluded=["aten_convolution_default_1"])
    verdicts = {v.node: v for v in analysis.verdicts.values()}
    assert verdicts["aten_floor_default"].category is VerdictCategory.UNSUPPORTED_OP
    assert verdicts["aten_convolution_default_1"].category is VerdictCategory.EXCLUDED
    first = verdicts["aten_convolution_default"]
    assert first.supported and first.category is None


def test_verdict_category_from_its_value():
    assert Verdict("n", "op", False, "why", "npu-limits").category is VerdictCategory.NPU_LIMITS
    with pytest.raises(ValueError):
        Verdict("n", "op", False, "why", "elsewhere")


def test_npu_compiler_that_never_settles_raises_what_to_do(edge_program, monkeypatch):
    rounds = []

    def refuses_forever(model, target):
        rounds.append(1)
        return {f"ghost_{len(rounds)}": "refused"}

    monkeypatch.setitem(partitioner_module.OPERATOR_CHECKS, "vela", refuses_forever)
    partitioner = NpuPartitioner("corstone-300")
    with pytest.raises(UnsupportedModelError, match="did not settle") as err:
        partitioner.refine(edge_program)
    assert "operators_not_to_delegate" in str(err.value) and "ghost_1" in str(err.value)
    assert len(rounds) >= partitioner_module.MAX_REFINEMENTS


def test_npu_kind_from_its_value_and_unknown_kinds():
    spec = NpuSpec(kind="ethos-u", name="x", macs_per_cycle=1, clock_hz=1, sram_bytes=1,
                   vendor_compiler="vela")
    assert spec.kind is NpuKind.ETHOS_U and f"{spec.kind}" == "ethos-u"
    with pytest.raises(ConfigError, match="unknown NPU kind"):
        NpuSpec(kind="tpu", name="x", macs_per_cycle=1, clock_hz=1, sram_bytes=1,
                vendor_compiler="vela")
