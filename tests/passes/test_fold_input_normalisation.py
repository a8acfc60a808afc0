"""FoldInputNormalisation: the front's 1x1 normalising layer folds into the convolution
reading it, exactly (compared in float64), only where the convolution pads nothing or the
layer only scales; otherwise the graph is left as it is."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mcu_npu import InputSpec
from mcu_npu.flow.export import export_module
from mcu_npu.flow.front import front
from mcu_npu.io_spec import declare
from mcu_npu.passes.aten import FoldInputNormalisation

aten = torch.ops.aten
MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)


class Net(nn.Module):
    def __init__(self, padding: int, groups: int = 1, twice: bool = False):
        super().__init__()
        self.conv = nn.Conv2d(3, 6 if groups == 1 else 3, 3, padding=padding, groups=groups)
        self.twice = twice

    def forward(self, x):
        y = self.conv(x)
        return y + x.mean() if self.twice else y


def _fold(net: nn.Module, spec: InputSpec):
    torch.manual_seed(0)
    net = net.eval().double()
    x = torch.randint(0, 256, (1, 8, 8, 3)).double()
    io = declare(spec, None, "float", [tuple(x.shape)])
    wrapped = front(net, io, (x,)).double()
    gm = export_module(wrapped, (x,))
    result = FoldInputNormalisation()(gm)
    convs = [n for n in result.graph_module.graph.nodes if n.target == aten.conv2d.default]
    with torch.no_grad():
        expected, got = wrapped(x), result.graph_module(x)
    return result.modified, len(convs), expected, got


@pytest.mark.parametrize("padding, spec", [
    (0, InputSpec(dtype="uint8", layout="channels_last", mean=MEAN, std=STD)),
    (1, InputSpec(dtype="uint8", layout="channels_last", mean=(128,), std=STD)),
    (1, InputSpec(dtype="uint8", layout="channels_last", std=STD)),
], ids=["per_channel_unpadded", "one_mean_padded", "std_only_padded"])
def test_folds_exactly_into_the_convolution(padding, spec):
    modified, convs, expected, got = _fold(Net(padding), spec)
    assert modified and convs == 1
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("net", [lambda: Net(1), lambda: Net(0, groups=3),
                                 lambda: Net(0, twice=True)],
                         ids=["padded_after_a_shift", "grouped", "two_readers"])
def test_leaves_what_would_not_be_exact(net):
    spec = InputSpec(dtype="uint8", layout="channels_last", mean=MEAN, std=STD)
    modified, convs, expected, got = _fold(net(), spec)
    assert not modified and convs == 2
