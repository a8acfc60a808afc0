"""One placement plan: decided once, frozen, made for one graph. A quantizer or partitioner
reused on another model plans that model instead of applying a stale decision."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.export import export
from torch import nn

from helpers import MixedNpuCpu, calibration_set, quantized_edge
from mcu_npu.errors import ConfigError
from mcu_npu.partition import NeutronPartitioner, NpuPartitioner
from mcu_npu.partition.plan import NodePlan, Plan, PlanOptions, plan_program
from mcu_npu.flow.edge import edge_compile_config
from mcu_npu.flow.export import export_module
from mcu_npu.flow.rewrite import default_aten_passes
from mcu_npu.flow.place import plan
from mcu_npu.quantization import NpuQuantizer, quantize
from mcu_npu.quantization.composed import TargetQuantizer
from mcu_npu.recipes import get_imxrt700_recipe
from mcu_npu.targets import get_target


class AllNpu(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


Mixed = MixedNpuCpu  # gelu stays on the CPU (no NPU conversion)


def _models():
    torch.manual_seed(0)
    return [(AllNpu().eval(), calibration_set((torch.randn(1, 3, 8, 8),), n=3, seed=1)),
            (Mixed().eval(), calibration_set((torch.randn(1, 3, 8, 8),), n=3, seed=2))]


def _pte(model, samples, recipe) -> bytes:
    return bytes(export(model, samples, recipe).get_executorch_program_manager().buffer)


def _aten_graph(model, example, target="imxrt700"):
    graph = export_module(model, example)
    return TargetQuantizer(target, aten_passes=default_aten_passes(get_target(target))) \
        .transform_for_annotation(graph)


def test_one_recipe_reused_on_two_models_gives_what_fresh_recipes_give():
    """The recipe holds one TargetQuantizer and one partitioner; exporting model A then
    model B with it gives, byte for byte, the programs fresh recipes give (the first model's
    placement is not applied to the second, in either order)."""
    (a, sa), (b, sb) = _models()
    fresh = [_pte(m, s, get_imxrt700_recipe(operators_not_to_delegate=["linear"]))
             for m, s in ((a, sa), (b, sb))]
    assert fresh[0] != fresh[1]
    reused = get_imxrt700_recipe(operators_not_to_delegate=["linear"])
    assert [_pte(a, sa, reused), _pte(b, sb, reused)] == fresh
    backwards = get_imxrt700_recipe(operators_not_to_delegate=["linear"])
    assert [_pte(b, sb, backwards), _pte(a, sa, backwards)] == fresh[::-1]


def test_plan_is_frozen_and_records_every_node():
    _, (model, samples) = _models()
    graph = _aten_graph(model, samples[0])
    decided = plan(graph, "imxrt700", PlanOptions(["linear"], calibration=samples))
    assert isinstance(decided, Plan) and decided.made_for(graph)
    with pytest.raises(dataclasses.FrozenInstanceError):
        decided.partitions = ()
    assert all(isinstance(n, NodePlan) for n in decided.nodes)
    cpu = {n.op: n for n in decided.nodes if n.runs_on == "cpu"}
    assert {"aten.gelu", "aten.linear"} <= set(cpu)
    assert cpu["aten.linear"].verdict.reason == "excluded by operators_not_to_delegate"
    assert all(n.verdict.supported for n in decided.nodes if n.runs_on == "npu")
    assert sum(len(p) for p in decided.partitions) == \
        sum(n.runs_on == "npu" for n in decided.nodes)
    assert decided.macs and sum(decided.macs.values()) > 0
    assert set(decided.placement.cpu) == {n.ident for n in cpu.values()}
    # the same decision whether the trial calibrates on data or on synthetic inputs
    synthetic = plan(graph, "imxrt700", PlanOptions(["linear"]))
    assert (synthetic.nodes, synthetic.partitions) == (decided.nodes, decided.partitions)


def test_quantizer_with_another_graphs_plan_plans_the_graph_it_is_given():
    (a, sa), (b, sb) = _models()
    graph_a, graph_b = _aten_graph(a, sa[0]), _aten_graph(b, sb[0])
    plan_a = plan(graph_a, "imxrt700", PlanOptions(["linear"]))
    quantizer = TargetQuantizer("imxrt700", plan=plan_a, planner=plan)
    assert quantizer.plan_for(graph_a) is plan_a
    plan_b = quantizer.plan_for(graph_b)
    assert plan_b.made_for(graph_b) and not plan_b.made_for(graph_a)
    assert plan_b.placement == plan(graph_b, "imxrt700", PlanOptions(["linear"])).placement
    assert {v.op for v in plan_b.placement.cpu.values()} >= {"aten.gelu", "aten.linear"}
    with pytest.raises(ConfigError, match="not both"):
        TargetQuantizer("imxrt700", plan=plan_a, operators_not_to_delegate=["conv2d"])


def test_partitioner_with_another_programs_plan_plans_the_program_it_is_given():
    (a, sa), (b, sb) = _models()
    edge_a = quantized_edge(a, sa[0], sa)[1].exported_program()
    edge_b = quantized_edge(b, sb[0], sb)[1].exported_program()
    plan_a = plan_program(edge_a, "imxrt700")
    partitioner = NpuPartitioner(plan=plan_a)
    assert partitioner.plan_for(edge_a) is plan_a
    plan_b = partitioner.plan_for(edge_b)
    assert plan_b.describes(edge_b) and not plan_b.describes(edge_a)
    assert plan_b == plan_program(edge_b, "imxrt700")
    with pytest.raises(ConfigError, match="plan is for"):
        NpuPartitioner("corstone-300", plan=plan_a)


def test_standalone_partitioner_reused_in_to_edge_transform_and_lower():
    """As the README shows: ``to_edge_transform_and_lower(ep, partitioner=[
    NeutronPartitioner()])``; the same partitioner object on a second model gives what a
    fresh one gives."""
    import executorch.kernels.quantized  # noqa: F401  (quantized_decomposed out variants)

    def lowered(quantized, partitioner) -> bytes:
        reference, example = quantized
        ep = torch.export.export(reference, example)  # each lowering exports anew
        edge = to_edge_transform_and_lower(ep, partitioner=[partitioner],
                                           compile_config=edge_compile_config())
        graph = edge.exported_program().graph
        assert any("executorch_call_delegate" in str(n.target) for n in graph.nodes)
        return bytes(edge.to_executorch().buffer)

    # each model quantized once: the partitioners, reused and fresh, lower the same module
    a, b = [(quantize(export_module(m, s[0]), s[0], s, NpuQuantizer()), s[0])
            for m, s in _models()]
    partitioner = NeutronPartitioner()
    reused = [lowered(a, partitioner), lowered(b, partitioner)]
    assert reused == [lowered(a, NeutronPartitioner()), lowered(b, NeutronPartitioner())]
