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
from mcu_npu.quantization import NpuQuantizer, quantize

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
    reference = quantize(gm, x, [x], NpuQuantizer())
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


class Repeats(nn.Module):
    """An unrolled recurrence (the same calls on the same layouts), the same op on a transposed
    view of an equal shape, and ops on a parameter (values that require grad)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x, h):
        for _ in range(4):
            h = torch.tanh(torch.addmm(h, x, h) * 0.5)
        return torch.sigmoid(h) + 1, torch.sigmoid(h.t()) + 1, torch.sigmoid(h.t() * self.w)


def _full_layouts(gm, mode):
    return [(n.name, _exact(n.meta.get("val"), mode)) for n in gm.graph.nodes
            if n.op == "call_function"]


def _exact(v, mode):
    if isinstance(v, torch.Tensor):
        return (tuple(v.shape), v.stride(), v.dtype, v.device, v.storage_offset(),
                v.requires_grad, v.fake_mode is mode)
    return tuple(_exact(x, mode) for x in v) if isinstance(v, (tuple, list)) else repr(v)


def test_repeated_calls_get_the_values_a_whole_propagation_gives(monkeypatch):
    from mcu_npu.graph import fake_values

    gm = torch.export.export(Repeats(), (torch.randn(4, 4), torch.randn(4, 4))).graph_module
    values = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode(values)
    values[0] = values[0].detach().requires_grad_(True)  # the parameter, as in a trace
    with mode:
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*values)
    expected = _full_layouts(gm, mode)
    for n in gm.graph.nodes:
        if n.op == "call_function":
            del n.meta["val"]
    made = []
    fake_of = fake_values._fake_of
    monkeypatch.setattr(fake_values, "_fake_of", lambda *a: made.append(fake_of(*a)) or made[-1])
    with mode:
        propagate(gm, mode, *values)
    assert _full_layouts(gm, mode) == expected
    assert len(made) >= 9  # the loop's repeated calls were made, not run
    strides = {v[1] for name, v in expected if name.startswith("sigmoid")}
    assert strides == {(4, 1), (1, 4)}  # the transposed input's sigmoid ran: its own strides
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op != "output"]
    assert len({id(v) for v in vals}) == len(vals)  # every node its own tensor
    assert not any(v.requires_grad for v in made)  # a value requiring grad is always run


def test_fake_value_of_a_repeated_call_is_the_one_dispatching_gives(monkeypatch):
    """``passes.aten._recurrent.fake_value`` (one node at a time, as the decompositions and
    the Edge conversion call it) shares its mode's memo: a repeated call is made, not run,
    and gets the layout dispatching gives."""
    from mcu_npu.graph import fake_values
    from mcu_npu.passes.aten._recurrent import fake_value

    gm = torch.export.export(Repeats(), (torch.randn(4, 4), torch.randn(4, 4))).graph_module
    values = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode(values)
    values[0] = values[0].detach().requires_grad_(True)
    with mode:
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*values)
    expected = _full_layouts(gm, mode)
    made = []
    fake_of = fake_values._fake_of
    monkeypatch.setattr(fake_values, "_fake_of", lambda *a: made.append(fake_of(*a)) or made[-1])
    for n in gm.graph.nodes:
        if n.op == "call_function":
            n.meta["val"] = fake_value(n.target, n.args, n.kwargs)
    assert _full_layouts(gm, mode) == expected
    assert len(made) >= 9 and fake_values.memo_of(mode) is fake_values.memo_of(mode)
    assert not any(v.requires_grad for v in made)
