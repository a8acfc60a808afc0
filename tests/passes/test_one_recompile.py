"""``one_recompile``: the passes' edits reach the module's code once, when the sequence ends."""

from __future__ import annotations

import torch
from torch import nn

from mcu_npu.passes.aten._recurrent import finish, one_recompile

aten = torch.ops.aten


class _Relu(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def _relu_to_neg(gm: torch.fx.GraphModule) -> None:
    """An edit as a pass makes it: every relu becomes a negation, then ``finish``."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target == aten.relu.default:
            node.target = aten.neg.default
    finish(gm)


def _module():
    x = torch.tensor([-1.0, 2.0])
    return torch.export.export(_Relu(), (x,)).module(), x


def test_finish_alone_regenerates_the_code_at_once():
    gm, x = _module()
    _relu_to_neg(gm)
    assert "neg" in gm.code
    assert torch.equal(gm(x), -x)


def test_inside_the_code_is_made_once_on_the_way_out():
    gm, x = _module()
    with one_recompile():
        _relu_to_neg(gm)
        assert "relu" in gm.code and "neg" not in gm.code  # not regenerated yet
    assert "neg" in gm.code
    assert torch.equal(gm(x), -x)


def test_the_code_is_made_even_when_a_pass_raises():
    gm, x = _module()
    try:
        with one_recompile():
            _relu_to_neg(gm)
            raise ValueError("a later pass failed")
    except ValueError:
        pass
    assert torch.equal(gm(x), -x)
