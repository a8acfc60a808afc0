"""Option grid and helpers shared by the recurrent-pass tests: build, export, run, compare."""

from __future__ import annotations

import collections
import warnings
from dataclasses import dataclass

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from torch import nn

aten = torch.ops.aten

PROPERTY_SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Case:
    input_size: int
    hidden_size: int
    num_layers: int
    bidirectional: bool
    bias: bool
    batch_first: bool
    seq_len: int
    batch: int
    with_state: bool

    def build(self, cls: type[nn.Module], **extra) -> nn.Module:
        torch.manual_seed(0)
        return cls(self.input_size, self.hidden_size, num_layers=self.num_layers, bias=self.bias,
                   batch_first=self.batch_first, bidirectional=self.bidirectional, **extra).eval()

    def inputs(self, num_states: int = 1) -> tuple:
        g = torch.Generator().manual_seed(1)
        shape = (self.batch, self.seq_len) if self.batch_first else (self.seq_len, self.batch)
        x = torch.randn(*shape, self.input_size, generator=g)
        if not self.with_state:
            return (x,)
        layers = self.num_layers * (2 if self.bidirectional else 1)
        states = tuple(torch.randn(layers, self.batch, self.hidden_size, generator=g) for _ in range(num_states))
        return (x, states[0] if num_states == 1 else states)


def cases(max_layers: int = 3) -> st.SearchStrategy[Case]:
    return st.builds(
        Case, input_size=st.integers(1, 12), hidden_size=st.integers(1, 16), num_layers=st.integers(1, max_layers),
        bidirectional=st.booleans(), bias=st.booleans(), batch_first=st.booleans(), seq_len=st.integers(1, 16),
        batch=st.integers(1, 3), with_state=st.booleans(),
    )


def export_module(module: nn.Module, args: tuple) -> torch.fx.GraphModule:
    """The pre-dispatch ATen graph the passes run on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(module, args).module(check_guards=False)


def assert_same(actual, expected) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


ELEMENTARY_OPS = {
    aten.linear.default, aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.sigmoid.default,
    aten.tanh.default, aten.relu.default, aten.slice.Tensor, aten.select.int, aten.unsqueeze.default,
    aten.cat.default, aten.zeros.default,
}


def check_pass(rewrite, module: nn.Module, args: tuple):
    """Apply ``rewrite`` to the exported module; the result must compute what ``module`` does."""
    gm = export_module(module, args)
    with torch.no_grad():
        expected = module(*args)
        result = rewrite(gm)
        assert_same(result.graph_module(*args), expected)
    return result


def check_pass_after(rewrite, module: nn.Module, args: tuple, setup=(), counted=None):
    """``check_pass`` of ``rewrite`` run after the ``setup`` passes; returns (graph, number of
    ``counted`` ops just before ``rewrite``, whether ``rewrite`` changed the graph)."""
    before = {}

    def run(gm):
        for p in setup:
            p(gm)
        before["n"] = count_ops(gm)[counted]
        return rewrite(gm)

    result = check_pass(run, module, args)
    return result.graph_module, before["n"], result.modified


def check_decomposition(rewrite, module: nn.Module, args: tuple) -> torch.fx.GraphModule:
    """A decomposition changes the graph, leaves only elementary ops, and stays exact."""
    result = check_pass(rewrite, module, args)
    assert result.modified
    assert set(count_ops(result.graph_module)) <= ELEMENTARY_OPS
    return result.graph_module


def assert_linear_counts(gm: torch.fx.GraphModule, layers: int, directions: int, seq_len: int) -> None:
    """One hoisted input projection per layer and direction, one recurrent matmul per step."""
    names = linear_weight_names(gm)
    assert sum("weight_ih" in n for n in names) == layers * directions
    assert sum("weight_hh" in n for n in names) == layers * directions * seq_len
    assert len(names) == layers * directions * (seq_len + 1)
    ops = count_ops(gm)
    assert not {aten.mm.default, aten.addmm.default, aten.matmul.default} & set(ops)


def count_ops(gm: torch.fx.GraphModule) -> collections.Counter:
    return collections.Counter(n.target for n in gm.graph.nodes if n.op == "call_function")


def linear_weight_names(gm: torch.fx.GraphModule) -> list[str]:
    """The attribute name of the weight of every ``aten.linear`` node."""
    return [n.args[1].target for n in gm.graph.nodes if n.op == "call_function" and n.target == aten.linear.default]


def assert_reexports(gm: torch.fx.GraphModule, args: tuple) -> None:
    """The rewritten module exports again, runs, and keeps every linear weight a parameter."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(gm, args)
    params = ep.graph_signature.inputs_to_parameters
    linears = [n for n in ep.graph.nodes if n.op == "call_function" and n.target == aten.linear.default]
    assert linears and all(n.args[1].name in params for n in linears)
    with torch.no_grad():
        assert_same(ep.module()(*args), gm(*args))
