"""Verdicts say why a node stays on the CPU with a category; converting and checking the
partitions always settles, moving what fails to the CPU with the reason."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from helpers import quantized_edge
from mcu_npu.errors import ConfigError
from mcu_npu.npu import families
from mcu_npu.partition import NpuPartitioner, SupportAnalysis, Verdict, VerdictCategory
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


def test_npu_compiler_refusing_no_node_of_a_partition_moves_the_partition(edge_program,
                                                                         monkeypatch):
    """A refusal that names no node of the partition cannot be pinned on one node: the
    whole partition goes to the CPU with the compiler's words, and partitioning settles."""
    rounds = []

    def refuses_ghosts(model, target):
        rounds.append(1)
        return {f"ghost_{len(rounds)}": "refused"}

    monkeypatch.setitem(families._FAMILIES, "ethos-u", dataclasses.replace(
        families.family(NpuKind.ETHOS_U), operator_check=refuses_ghosts))
    rejected = NpuPartitioner("corstone-300").refine(edge_program)
    assert rejected and len(rounds) == 2  # both convolutions' partitions, once each
    assert all(r.category is VerdictCategory.NPU_COMPILER and "ghost_" in r.reason
               for r in rejected.values())
    assert {n.split("_default")[0] for n in rejected} == {"aten_convolution"}


def test_a_conversion_failure_moves_that_node_to_the_cpu(edge_program, monkeypatch):
    """A converter that fails on one node (a test double raising inside the conversion)
    costs that node its NPU place, with the error as the reason; the rest stays."""
    from mcu_npu.tflite import registry

    conv_op = next(n.target for n in edge_program.graph.nodes
                   if n.name == "aten_convolution_default_1")
    entry = registry.REGISTRY[conv_op]

    def fails_on_second(ctx, node):
        if node.name == "aten_convolution_default_1":
            raise IndexError("a converter bug")
        return entry.convert(ctx, node)

    monkeypatch.setitem(registry.REGISTRY, conv_op,
                        dataclasses.replace(entry, convert=fails_on_second))
    rejected = NpuPartitioner("imxrt700").refine(edge_program)
    assert set(rejected) == {"aten_convolution_default_1"}
    why = rejected["aten_convolution_default_1"]
    assert why.category is VerdictCategory.CONVERSION
    assert "IndexError: a converter bug" in why.reason


def test_npu_kind_from_its_value_and_unknown_kinds():
    spec = NpuSpec(kind="ethos-u", name="x", macs_per_cycle=1, clock_hz=1, sram_bytes=1,
                   vendor_compiler="vela")
    assert spec.kind is NpuKind.ETHOS_U and f"{spec.kind}" == "ethos-u"
    with pytest.raises(ConfigError, match="unknown NPU kind"):
        NpuSpec(kind="tpu", name="x", macs_per_cycle=1, clock_hz=1, sram_bytes=1,
                vendor_compiler="vela")
