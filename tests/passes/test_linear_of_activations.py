"""LinearOfActivations is exact and leaves linears with constant weights alone."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mcu_npu.passes.aten import LinearOfActivations

aten = torch.ops.aten


class RuntimeWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)  # constant weight: stays a linear
        self.bias = nn.Parameter(torch.randn(4))

    def forward(self, x, w):
        return F.linear(self.fc(x), w * 2, self.bias)  # weight computed from an input


def test_runtime_weights_become_matmuls():
    model = RuntimeWeight().eval()
    args = (torch.randn(3, 8), torch.randn(4, 8))
    gm = torch.export.export(model, args).module(check_guards=False)
    assert LinearOfActivations()(gm).modified
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(aten.linear.default) == 1 and aten.matmul.default in targets
    assert torch.allclose(gm(*args), model(*args), rtol=1e-5, atol=1e-6)
    assert not LinearOfActivations()(gm).modified
