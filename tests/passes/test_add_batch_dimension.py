"""AddBatchDimension is exact: unbatched convolutions and pooling give the module's outputs,
and only unbatched ones are rewritten."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mcu_npu.passes.aten import AddBatchDimension

aten = torch.ops.aten


class Unbatched(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(3, 4, 3, padding=1)
        self.t1 = nn.ConvTranspose1d(4, 2, 3, stride=2)

    def forward(self, x):
        return F.max_pool1d(self.t1(torch.relu(self.c1(x))), 2)


class Unbatched2d(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3)
        self.t = nn.ConvTranspose2d(4, 4, 2, stride=2)

    def forward(self, x):
        y = self.t(F.avg_pool2d(self.c(x), 2, ceil_mode=True))
        return F.adaptive_avg_pool2d(F.max_pool2d(y, 2), 1)


@pytest.mark.parametrize("model, shape", [(Unbatched(), (3, 11)), (Unbatched2d(), (3, 13, 9))])
def test_unbatched_ops_get_a_batch_of_one(model, shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    gm = torch.export.export(model.eval(), (x,)).module(check_guards=False)
    assert AddBatchDimension()(gm).modified
    ranks = [n.args[0].meta["val"].dim() for n in gm.graph.nodes
             if n.op == "call_function" and n.target in
             (aten.conv1d.default, aten.conv2d.default, aten.conv_transpose1d.default,
              aten.conv_transpose2d.input, aten.max_pool1d.default, aten.max_pool2d.default,
              aten.avg_pool2d.default, aten.adaptive_avg_pool2d.default)]
    assert ranks and all(r == ranks[0] for r in ranks) and ranks[0] == len(shape) + 1
    assert torch.allclose(gm(x), model(x), rtol=1e-5, atol=1e-6)


def test_batched_ops_are_left_alone():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(2)).eval()
    x = torch.randn(2, 3, 8, 8)
    gm = torch.export.export(model, (x,)).module(check_guards=False)
    assert not AddBatchDimension()(gm).modified
