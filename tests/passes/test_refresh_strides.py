"""``RefreshStrides``: the values it leaves are, node for node, those a whole fake tensor
propagation gives, and it reports a change exactly when a stride changed; on graphs with
stale strides (a view's, recorded before ``to_edge`` made it a copy) and without."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch._guards import detect_fake_mode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from helpers import value_layout
from mcu_npu.flow.edge import to_edge_program
from mcu_npu.flow.export import export_module
from mcu_npu.passes.edge import RefreshStrides
from mcu_npu.quantization import NpuQuantizer, quantize

aten = torch.ops.aten


class PermuteIntoConvAndAdd(nn.Module):
    """A permute feeding a convolution and an add, and a pool returning (values, indices)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(6, 8, 1)
        self.conv2 = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):  # x: [1, 6, 6, 6]
        y = x.permute(0, 3, 1, 2)
        z = self.conv(y) + y.mean(1, keepdim=True)
        w = nn.functional.adaptive_max_pool2d(z.permute(0, 1, 3, 2), (3, 4))
        return self.conv2(w), z * 0.5


def _edge():
    torch.manual_seed(0)
    x = (torch.randn(1, 6, 6, 6),)
    gm = export_module(PermuteIntoConvAndAdd().eval(), x)
    reference = quantize(gm, x, [x, (torch.randn(1, 6, 6, 6),)], NpuQuantizer())
    return to_edge_program(copy.deepcopy(reference), x).exported_program()


def _as_recorded_through_views(ep) -> int:
    """Give every node the value it gets with each ``permute_copy`` run as the view it was
    (channels-last strides after it), as ``torch.export`` records them; the number of
    permutes."""
    gm = ep.graph_module
    copies = {n: n.target for n in gm.graph.nodes if "permute_copy" in str(n.target)}
    for n in copies:
        n.target = aten.permute.default
    _whole_propagation(ep)
    for n, target in copies.items():
        n.target = target
    return len(copies)


def _whole_propagation(ep) -> bool:
    """FakeTensorProp over the whole graph; whether a stride changed."""
    gm = ep.graph_module
    values = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode(values)
    before = {n: _strides(n.meta.get("val")) for n in gm.graph.nodes}
    with mode:
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*values)
    return any(_strides(n.meta.get("val")) != s for n, s in before.items())


def _strides(v):
    if isinstance(v, torch.Tensor):
        return v.stride()
    return tuple(_strides(x) for x in v) if isinstance(v, (list, tuple)) else None


def _layouts(ep):
    return [(n.name, value_layout(n.meta.get("val"))) for n in ep.graph_module.graph.nodes]


@pytest.mark.parametrize("stale", [True, False], ids=["stale", "fresh"])
def test_values_and_change_are_those_of_a_whole_propagation(stale):
    ep = _edge()
    if stale:
        assert _as_recorded_through_views(ep) == 2
    expected = copy.deepcopy(ep)
    expected_modified = _whole_propagation(expected)
    assert expected_modified == stale  # the stale case holds a stale stride, the other none
    result = RefreshStrides()(ep)
    assert _layouts(ep) == _layouts(expected)
    assert result.modified == expected_modified


def test_a_stale_value_behind_an_unchanged_node_is_refreshed():
    """A value can be stale though its inputs' values are as recorded (a pass updated the
    node before it and not it): the pass checks each node against its inputs."""
    ep = _edge()
    gm = ep.graph_module
    expected = copy.deepcopy(ep)
    _whole_propagation(expected)
    pool = next(n for n in gm.graph.nodes if "adaptive_max_pool2d" in str(n.target))
    values = next(u for u in pool.users if u.args[1] == 0)
    val = values.meta["val"]
    with val.fake_mode:
        values.meta["val"] = val.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    quantized = next(iter(values.users))
    val = quantized.meta["val"]
    with val.fake_mode:
        quantized.meta["val"] = torch.empty_like(values.meta["val"], dtype=val.dtype)
    assert values.meta["val"].stride() != val.stride()
    assert RefreshStrides()(ep).modified
    assert _layouts(ep) == _layouts(expected)


class SameOpTwoLayouts(nn.Module):
    def forward(self, y, x):
        return torch.relu(y) + 1.0, torch.relu(x) + 1.0


def test_a_call_seen_before_on_another_layout_is_run_again():
    """A value kept because an earlier node made the same call must be of a call on the
    same layouts: ``relu`` of a channels-last input first, then of a contiguous one whose
    value was recorded channels-last."""
    from executorch.exir import to_edge

    y = torch.randn(1, 4, 3, 5).to(memory_format=torch.channels_last)
    x = torch.randn(1, 4, 3, 5)
    ep = to_edge(torch.export.export(SameOpTwoLayouts(), (y, x))).exported_program()
    expected = copy.deepcopy(ep)
    _whole_propagation(expected)
    relus = [n for n in ep.graph_module.graph.nodes if "relu" in str(n.target)]
    stale = [relus[1], next(iter(relus[1].users))]
    for n in stale:
        val = n.meta["val"]
        with val.fake_mode:
            n.meta["val"] = val.contiguous(memory_format=torch.channels_last)
    assert stale[0].meta["val"].stride() == relus[0].meta["val"].stride() != x.stride()
    assert RefreshStrides()(ep).modified
    assert _layouts(ep) == _layouts(expected)
