"""One-node core-ATen decompositions done in place (``decompose_in_place``) and Edge clones
as ``_clone_dim_order`` in place: the Edge program is the one ``to_edge`` gives after its
full decomposition, with no re-trace on the way."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from executorch.exir import to_edge
from torch import nn
from torch.export import ExportedProgram

from mcu_npu.flow.edge_dialect import needs_retrace, to_edge_in_place
from mcu_npu.flow.edge import core_aten_program, edge_compile_config
from mcu_npu.flow.export import export_module
from mcu_npu.quantization import NpuQuantizer, quantize
from test_edge_dialect import _structure


class Mixed(nn.Module):
    """Every rewritten op: convolutions of each kind, flatten (of a contiguous tensor, of
    a strided one a view can flatten, of one it cannot, and of one dim), transpose,
    contiguous, unflatten, squeeze, softmax, dropout (eval) and zeros."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.conv1d = nn.Conv1d(4, 4, 3, groups=2, bias=False)
        self.up = nn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1)
        self.up1d = nn.ConvTranspose1d(4, 2, 2, stride=2)

    def forward(self, x):
        y = self.conv(x)                                       # [1, 4, 4, 4]
        z = self.conv1d(y.flatten(2))                          # [1, 4, 14]
        t = z.transpose(1, 2).contiguous().unflatten(1, (2, 7))
        s = F.dropout(F.softmax(t.unsqueeze(0).squeeze(0), -1), 0.1, training=False)
        half = y[:, :, :2]                                     # [1, 4, 2, 4], strided
        strided = half.permute(0, 2, 3, 1).flatten(1, 2) + half.flatten(2).transpose(1, 2)
        return s + torch.zeros(s.shape), self.up(y), self.up1d(z.flatten(2)), strided


class ConvNet(nn.Module):
    """What convnets from model libraries hold: in-place activations and residual sums, max
    and adaptive pooling, padding, ``reshape_as`` and ``expand_as``."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = F.relu(self.conv(x), inplace=True)
        z = self.conv2(F.max_pool2d(y, 2))
        z += F.max_pool2d(y, 2)
        z = F.hardtanh(z, 0.0, 6.0, inplace=True)
        s = F.silu(F.pad(z, (1, 1, 0, 2)), inplace=True)
        g = F.adaptive_avg_pool2d(s, 1)
        t = s * 2.0
        t.relu_()  # read below as ``t``, the value before the call in the traced graph
        h = F.hardswish(s * g.expand_as(s) + t, inplace=True)
        return F.adaptive_avg_pool2d(h, 2).reshape_as(g.flatten(1).repeat(1, 4))


def _no_retrace(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the program was re-traced to decompose it")
    monkeypatch.setattr(ExportedProgram, "run_decompositions", fail)


@pytest.mark.parametrize("case", ["mixed_float", "mixed_quantized", "convnet_float",
                                  "convnet_quantized"])
def test_in_place_matches_decomposed_to_edge(case, monkeypatch):
    torch.manual_seed(0)
    model, shape = {"mixed": (Mixed, (1, 3, 4, 4)), "convnet": (ConvNet, (1, 3, 8, 8))}[
        case.split("_")[0]]
    quantized = case.endswith("quantized")
    x = (torch.randn(shape),)
    gm = export_module(model().eval(), x)
    if quantized:
        gm = quantize(gm, x, [x], NpuQuantizer())
    twin = torch.export.export(copy.deepcopy(gm), x)
    for node in twin.graph.nodes:  # as core_aten_program drops it
        node.meta.pop("from_node", None)
    expected = to_edge(twin, compile_config=edge_compile_config())
    _no_retrace(monkeypatch)
    ep = core_aten_program(gm, x, edge_compile_config())
    assert needs_retrace(ep.graph_module) is None
    got = to_edge_in_place(ep, edge_compile_config())
    assert _structure(got) == _structure(expected)
    for g, e in zip(got.exported_program().module()(*x), expected.exported_program().module()(*x)):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


class Mutates(nn.Module):
    def forward(self, x):
        t = x * 2.0
        t.relu_()
        return t + 1.0


def test_a_later_read_of_the_mutated_value_reads_the_functional_result(monkeypatch):
    """An FX graph may read a value an in-place op wrote through the node that made the
    value (eager semantics: it reads the written tensor); functionalized, it reads the
    result."""
    x = (torch.randn(2, 8),)
    gm = export_module(Mutates(), x)
    nodes = {n.target: n for n in gm.graph.nodes}
    relu, add = nodes[torch.ops.aten.relu_.default], nodes[torch.ops.aten.add.Tensor]
    add.replace_input_with(relu, relu.args[0])
    gm.recompile()
    torch.testing.assert_close(gm(*x), Mutates()(*x), rtol=0, atol=0)
    _no_retrace(monkeypatch)
    ep = core_aten_program(gm, x, edge_compile_config())
    assert torch.ops.aten.relu.default in {n.target for n in ep.graph.nodes}
    torch.testing.assert_close(ep.module()(*x), Mutates()(*x), rtol=0, atol=0)


class Kept(nn.Module):
    """Forms left to the decomposition: a dtype softmax, a flatten of one dim that is an
    output, and an in-place op on a view."""

    def forward(self, x):
        y = x * 1
        y[:, :2].relu_()  # writes through the view into ``y``
        return F.softmax(x, -1, dtype=torch.float64), x.permute(0, 2, 1).flatten(2), y


def test_other_forms_are_left_to_the_decomposition():
    x = (torch.randn(2, 3, 4),)
    ep = core_aten_program(export_module(Kept(), x), x, edge_compile_config())
    ops = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten._to_copy.default in ops  # the dtype softmax, decomposed by torch
    assert torch.ops.aten.flatten.using_ints not in ops
    assert torch.ops.aten.slice_scatter.default in ops  # the view's write, functionalized
    for got, want in zip(ep.module()(*x), Kept()(*x)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
