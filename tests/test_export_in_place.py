"""Exporting a converted reference in place gives the program ``torch.export.export`` gives,
node for node, and leaves to ``torch.export`` the graphs only a trace handles."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mcu_npu.flow.export import export_module
from mcu_npu.flow.rewrite import default_aten_passes
from mcu_npu.graph.ids import tag_nodes
from mcu_npu.quantization import NpuQuantizer, quantize
from mcu_npu.targets import get_target

from mcu_npu.flow.export_in_place import export_in_place

from helpers import value_layout

from test_edge_dialect import Scalars, TinyGRU, Views


class TwoOutputs(nn.Module):
    """Two outputs, a running-statistics buffer and a weight used twice."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 4)

    def forward(self, x, y):
        z = torch.relu(self.bn(self.conv(x)))
        return self.fc(z.mean((2, 3))), self.fc(y) + 1.0


CASES = {"views": (Views, [(1, 3, 4, 6)]), "gru": (TinyGRU, [(1, 5, 4)]),
         "scalars": (Scalars, [(1, 3, 4, 4)]), "two": (TwoOutputs, [(1, 3, 5, 5), (2, 4)])}


def _reference(case: str):
    name, quantized = case.split("_")
    cls, shapes = CASES[name]
    g = torch.Generator().manual_seed(0)
    x = tuple(torch.randn(s, generator=g) for s in shapes)
    gm = tag_nodes(export_module(cls().eval(), x))
    if name == "gru":
        for p in default_aten_passes(get_target("ethos-u55-128")):
            p(gm)
        gm.recompile()
    if quantized == "quantized":
        gm = quantize(gm, x, [x], NpuQuantizer())
    return gm, x


def _structure(ep):
    """Every node's op, name, target, arguments (by position) and value layout, the graph
    signature and the state."""
    nodes = list(ep.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}

    def carried(n):  # what export carries over from the node it traced
        return {k: str(n.meta.get(k)) for k in ("custom", "stack_trace")} \
            if n.op == "call_function" else None

    rows = [(n.op, n.name, str(n.target),
             str(torch.fx.node.map_arg((n.args, n.kwargs), index.__getitem__)),
             value_layout(n.meta.get("val")), carried(n)) for n in nodes]
    sig = ep.graph_signature
    return (rows, [(s.kind, s.arg.name, s.target, s.persistent) for s in sig.input_specs],
            [(s.kind, s.arg.name, s.target) for s in sig.output_specs],
            list(ep.state_dict), sorted(ep.constants), ep.call_spec, ep.verifiers)


@pytest.mark.parametrize("case", [f"{name}_{q}" for name in CASES
                                  for q in ("float", "quantized")])
def test_in_place_export_matches_torch_export(case):
    gm, x = _reference(case)
    expected = torch.export.export(gm, x)
    got = export_in_place(gm, x)
    assert got is not None
    assert _structure(got) == _structure(expected)
    for key, tensor in expected.state_dict.items():
        assert got.state_dict[key] is tensor  # the module's own tensors, not copies
    for a, b in zip(got.module()(*x), expected.module()(*x)):
        assert torch.equal(a, b)


class Tied(nn.Module):
    """One weight under two names: export lifts it once, under the name it meets first."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4, bias=False)
        self.b = nn.Linear(4, 4, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(x) + self.a(x)


class NonPersistent(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("offset", torch.ones(4), persistent=False)

    def forward(self, x):
        return x + self.offset


@pytest.mark.parametrize("model, why", [
    (Views(), "a symbolically traced graph has no export calling convention"),
    (NonPersistent(), "a non-persistent buffer is a constant, not state"),
    (Tied(), "a weight reached under a name export does not lift"),
])
def test_graphs_only_a_trace_handles_go_to_torch_export(model, why):
    x = (torch.randn(1, 3, 4, 6),) if isinstance(model, Views) else (torch.randn(2, 4),)
    gm = torch.fx.symbolic_trace(model) if isinstance(model, Views) else export_module(model, x)
    if isinstance(model, Tied):  # the second name, as a hand-edited graph may use it
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                node.target = "b.weight"
        gm.recompile()
    assert export_in_place(gm, x) is None, why


def test_an_input_that_is_not_a_tensor_goes_to_torch_export():
    gm, x = _reference("views_float")
    assert export_in_place(gm, (x[0], x[0])) is None  # not the calling convention's arity
    assert export_in_place(gm, (3.0,)) is None
