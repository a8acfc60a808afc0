"""MakeConvPaddingExplicit: a convolution padded by mode ("same", "valid") becomes one with
explicit padding, an even kernel's odd element a constant pad after; exact in float. Through
the whole flow (``tests/e2e/test_signal_models.py``) such a convolution runs on the NPU with
its pad."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from mcu_npu.flow.export import export_module
from mcu_npu.passes.aten import MakeConvPaddingExplicit

aten = torch.ops.aten

CASES = {  # name -> (module, input shape, constant pads expected)
    "conv1d_same_even": (nn.Conv1d(3, 4, 8, padding="same"), (2, 3, 19), [[0, 1]]),
    "conv1d_same_odd": (nn.Conv1d(3, 4, 5, padding="same", bias=False), (1, 3, 11), []),
    "conv1d_same_even_dilated": (nn.Conv1d(2, 2, 4, padding="same", dilation=3), (1, 2, 16),
                                 [[0, 1]]),
    "conv1d_valid": (nn.Conv1d(3, 4, 6, padding="valid"), (1, 3, 12), []),
    "conv1d_same_unbatched": (nn.Conv1d(3, 4, 4, padding="same"), (3, 10), [[0, 1]]),
    "conv2d_same_even_width": (nn.Conv2d(3, 4, (3, 4), padding="same", groups=1), (1, 3, 5, 9),
                               [[0, 1, 0, 0]]),
    "conv2d_same_even_both": (nn.Conv2d(4, 4, (2, 6), padding="same", groups=4,
                                        dilation=(1, 2)), (1, 4, 6, 13), [[0, 0, 0, 1]]),
}


@pytest.mark.parametrize("name", CASES)
def test_padding_by_mode_becomes_explicit_and_exact(name):
    torch.manual_seed(0)
    module, shape, pads = CASES[name]
    module.eval()
    x = torch.randn(shape)
    result = MakeConvPaddingExplicit()(export_module(module, (x,)))
    assert result.modified
    gm = result.graph_module
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert aten.conv1d.padding not in targets and aten.conv2d.padding not in targets
    assert [n.args[1] for n in gm.graph.nodes
            if n.target == aten.constant_pad_nd.default] == pads
    with torch.no_grad():
        torch.testing.assert_close(gm(x), module(x), rtol=1e-5, atol=1e-6)


def test_explicit_padding_is_left_alone():
    gm = export_module(nn.Conv1d(3, 4, 3, padding=1).eval(), (torch.randn(1, 3, 8),))
    assert not MakeConvPaddingExplicit()(gm).modified
