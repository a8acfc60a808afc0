"""The bitset grouping proposes exactly the partitions torch.fx's capability-based
partitioner does: on random graphs (branches, joins, tuple outputs read through getitem,
any member set) and on the Edge programs of models with ops kept off the NPU."""

from __future__ import annotations

import operator
import random

import pytest
import torch
from torch import nn
from torch.fx import Graph, GraphModule
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from helpers import Branchy, quantized_edge
from mcu_npu.partition import SupportAnalysis
from mcu_npu.partition.grouping import propose_groups
from mcu_npu.partition.propose import cluster_members
from mcu_npu.targets import get_target


def _join(*xs):
    return sum(xs)


def _pair(x):
    return x, x


class _Members(OperatorSupportBase):
    def __init__(self, members):
        self.members = members

    def is_node_supported(self, submodules, node):
        return node in self.members


def torch_groups(gm: GraphModule, members) -> list[set]:
    proposed = CapabilityBasedPartitioner(gm, _Members(members),
                                          allows_single_node_partition=True
                                          ).propose_partitions()
    return [set(p.nodes) for p in proposed]


def random_graph(rng: random.Random, size: int) -> GraphModule:
    """A DAG of ``size`` ops over two inputs: joins of up to three earlier values, and
    pairs read through one or two getitems (some of which read nothing else)."""
    graph = Graph()
    values = [graph.placeholder("x"), graph.placeholder("y")]
    while len(values) < size:
        if rng.random() < 0.2:
            pair = graph.call_function(_pair, (rng.choice(values[-6:]),))
            for k in range(rng.choice((1, 2))):
                values.append(graph.call_function(operator.getitem, (pair, k)))
        else:
            picks = rng.sample(values, min(len(values), rng.choice((1, 2, 2, 3))))
            values.append(graph.call_function(_join, tuple(picks)))
    ends = [v for v in values if not v.users] or values[-1:]
    graph.output(tuple(ends))
    return GraphModule(nn.Module(), graph)


@pytest.mark.parametrize("seed", range(8))
def test_random_graphs_give_torchs_partitions(seed):
    rng = random.Random(seed)
    checked = 0
    for _ in range(40):
        gm = random_graph(rng, rng.randint(4, 60))
        ops = [n for n in gm.graph.nodes if n.op == "call_function"]
        share = rng.choice((0.3, 0.6, 0.85, 1.0))
        members = {n for n in ops if rng.random() < share}
        expected = torch_groups(gm, members)
        assert propose_groups(gm.graph, members) == expected
        checked += len(expected) > 1
    assert checked > 0  # the draws include graphs split into several partitions


class LstmHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, batch_first=True)
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(self.lstm(x)[0][:, -1])


@pytest.mark.parametrize("model, shape, target, excluded", [
    (Branchy(), (1, 3, 8, 6), "imxrt700", ["tanh"]),
    (Branchy(), (1, 3, 8, 6), "imxrt700", ["add"]),
    (LstmHead(), (1, 5, 4), "corstone-300", ["aten.linear"]),
    (LstmHead(), (1, 5, 4), "corstone-300", ["sigmoid"])])
def test_edge_programs_give_torchs_partitions(model, shape, target, excluded):
    from mcu_npu.flow.export import export_module
    from mcu_npu.flow.rewrite import default_aten_passes

    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    target = get_target(target)
    graph = export_module(model.eval(), (x,))
    for p in default_aten_passes(target):  # the LSTM unrolled into its gates
        graph = p(graph).graph_module
    _, edge = quantized_edge(graph, (x,), [(x,)])
    program = edge.exported_program()
    members = cluster_members(SupportAnalysis(program, target, excluded))
    expected = torch_groups(program.graph_module, members)
    assert len(expected) > 1
    assert propose_groups(program.graph, members) == expected
