"""Partition proposal: the linear-time single-group path agrees with torch.fx's
capability-based partitioner, and declines member sets that are not one convex group."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers import Branchy, quantized_edge
from mcu_npu.partition import SupportAnalysis
from mcu_npu.partition.propose import cluster_members, general_groups, single_group
from mcu_npu.targets import get_target


class TinyGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 6, batch_first=True)

    def forward(self, x):
        return self.gru(x)[0]


def _analysis(model, shape, excluded=()):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    target = get_target("imxrt700")
    from mcu_npu.flow.export import export_module
    from mcu_npu.flow.rewrite import default_aten_passes

    graph = export_module(model.eval(), (x,))
    for p in default_aten_passes(target):
        graph = p(graph).graph_module
    _, edge = quantized_edge(graph, (x,), [(x,)])
    program = edge.exported_program()
    return program, SupportAnalysis(program, target, excluded)


@pytest.mark.parametrize("model, shape", [(Branchy(), (1, 3, 8, 6)), (TinyGRU(), (1, 5, 4))])
def test_single_group_equals_the_general_partitioner(model, shape):
    program, analysis = _analysis(model, shape)
    members = cluster_members(analysis)
    group = single_group(list(program.graph.nodes), members)
    assert group is not None
    assert [group] == general_groups(program, members)


@pytest.mark.parametrize("excluded, groups", [(["tanh"], 2), (["aten.sigmoid"], 1),
                                               (["convolution"], 1), (["add"], 2)])
def test_sets_that_are_not_one_convex_group_go_to_the_general_partitioner(excluded, groups):
    """tanh inside a branch: the members leave and come back (not convex); add at the join:
    the members split. Either way the general partitioner's groups stand. (``"add"`` names
    ``aten.add.Tensor``.)"""
    program, analysis = _analysis(Branchy(), (1, 3, 8, 6), excluded)
    members = cluster_members(analysis)
    general = general_groups(program, members)
    got = single_group(list(program.graph.nodes), members)
    if len(general) == 1:
        assert got == general[0]
    else:
        assert got is None
    compute = [g for g in general if any(n in analysis.verdicts for n in g)]
    assert len(compute) == groups
