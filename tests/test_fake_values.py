"""``graph.fake_values.propagate``: every node's fake value as ``FakeTensorProp`` gives it,
the quantize / dequantize nodes made by their rule, on quantized ATen and Edge graphs."""

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
from mcu_npu.graph.fake_values import output_dtype, propagate
from mcu_npu.quantization import NeutronQuantizer, quantize

qd = torch.ops.quantized_decomposed


class Net(nn.Module):
    """Channels-last views between quantized ops, a recurrent layer and a reduction."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.gru = nn.GRU(8, 8, batch_first=True)

    def forward(self, x):
        y = torch.relu(self.conv(x)).permute(0, 2, 3, 1)  # [1, 6, 6, 8]
        z = self.gru(y.flatten(1, 2))[0]
        return z.mean(1), y * 0.5


def _programs():
    x = (torch.randn(1, 3, 6, 6),)
    gm = export_module(Net().eval(), x)
    reference = quantize(gm, x, [x], NeutronQuantizer())
    return x, reference, to_edge_program(copy.deepcopy(reference), x).exported_program()


def _layouts(gm):
    return [(n.name, value_layout(n.meta.get("val"))) for n in gm.graph.nodes
            if n.op == "call_function"]


@pytest.mark.parametrize("which", ["edge", "exported"])
def test_values_are_those_fake_tensor_propagation_gives(which):
    x, reference, edge = _programs()
    ep = edge if which == "edge" else torch.export.export(reference, x)
    gm = ep.graph_module
    values = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode(values)
    with mode:
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*values)
    expected = _layouts(gm)
    for n in gm.graph.nodes:
        if n.op == "call_function":
            del n.meta["val"]
    with mode:
        propagate(gm, mode, *values)
    assert _layouts(gm) == expected
    qdq = [n for n in gm.graph.nodes if n.op == "call_function"
           and output_dtype(n.target, tuple(a.meta["val"] if isinstance(a, torch.fx.Node)
                                            else a for a in n.args), n.kwargs) is not None]
    assert len(qdq) >= 8  # the rule made these values (the strided ones ran)


def test_the_rule_covers_only_the_inputs_the_op_takes():
    f32, i8 = torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.int8)
    quant = (0.1, 0, -128, 127, torch.int8)
    assert output_dtype(qd.quantize_per_tensor.default, (f32, *quant), {}) == torch.int8
    assert output_dtype(qd.quantize_per_tensor.default, (i8, *quant), {}) is None
    assert output_dtype(qd.dequantize_per_tensor.default, (i8, *quant), {}) == torch.float32
    assert output_dtype(qd.dequantize_per_tensor.default, (i8, *quant),
                        {"out_dtype": torch.float64}) == torch.float64
    assert output_dtype(qd.dequantize_per_tensor.default, (f32, *quant), {}) is None
    assert output_dtype(qd.quantize_per_tensor.default, (f32.t(), *quant), {}) is None
    assert output_dtype(qd.quantize_per_channel.default, (f32, *quant), {}) is None
    assert output_dtype(torch.ops.aten.relu.default, (f32,), {}) is None


def test_a_bare_graph_gets_the_values_its_module_would():
    _, _, edge = _programs()
    gm = edge.graph_module
    values = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode(values)
    with mode:
        propagate(gm, mode, *values)
    expected = _layouts(gm)
    for n in gm.graph.nodes:
        if n.op == "call_function":
            del n.meta["val"]
    with mode:
        propagate(gm.graph, mode, *values)
    assert _layouts(gm) == expected
