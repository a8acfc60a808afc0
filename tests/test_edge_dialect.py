"""Edge conversion in place gives the program ``to_edge`` gives, node for node, and leaves
to ``to_edge`` the graphs where a re-tracing pass would change more than op names."""

from __future__ import annotations

import copy

import pytest
import torch
from executorch.exir import to_edge
from torch import nn

from mcu_npu.flow.edge_dialect import needs_retrace, to_edge_in_place
from mcu_npu.flow.edge import core_aten_program, edge_compile_config, to_edge_program
from mcu_npu.flow.export import export_module
from mcu_npu.flow.rewrite import default_aten_passes
from mcu_npu.quantization import NpuQuantizer, quantize
from mcu_npu.targets import get_target

from helpers import value_layout


class Views(nn.Module):
    """Strided views (permute, transpose, select, slice) feeding elementwise ops, so a copy's
    contiguous layout changes the strides of what follows it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(6, 5)

    def forward(self, input):                             # a builtin's name: renamed
        y = torch.relu(self.conv(input))                  # [1, 8, 4, 6]
        p = y.permute(0, 2, 3, 1)                         # strided view
        p = p + torch.sigmoid(p)                          # ... then elementwise ops on it
        t = y.transpose(2, 3)[:, :, 1:4]                  # transpose, slice
        s = y.select(2, 0)                                # [1, 8, 6]
        return self.fc(s).reshape(1, 40), p.mean(-1), t * t


class TinyGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 6, num_layers=2, batch_first=True)
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(self.gru(x)[0][:, -1])


class Scalars(nn.Module):
    """Floats passed where the op takes a tensor: an attention-style scale and a
    normalization's epsilon, on a float32 tensor."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1)

    def forward(self, x):
        y = torch.ops.aten.mul.Tensor(self.conv(x), 0.25)
        var = torch.ops.aten.add.Tensor(y.pow(2).mean(1, keepdim=True), 1e-6)
        return torch.ops.aten.sub.Tensor(y * torch.rsqrt(var), 0.5)


def _program(model, shape, quantized=True, aten_passes=False):
    model = model.eval()
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(0)),)
    gm = export_module(model, x)
    if aten_passes:
        for p in default_aten_passes(get_target("ethos-u55-128")):
            p(gm)
        gm.recompile()
    if quantized:
        gm = quantize(gm, x, [x], NpuQuantizer())
    return core_aten_program(gm, x, edge_compile_config()), x


def _structure(edge):
    """Every node's op, name, target, arguments (by position), value layout and debug handle,
    and the graph signature's kinds and targets."""
    ep = edge.exported_program()
    nodes = list(ep.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}

    rows = [(n.op, n.name, str(n.target),
             str(torch.fx.node.map_arg((n.args, n.kwargs), index.__getitem__)),
             value_layout(n.meta.get("val")), n.meta.get("debug_handle")) for n in nodes]
    sig = ep.graph_signature
    return (rows, [(str(s.kind), s.target) for s in sig.input_specs],
            [(str(s.kind), s.target) for s in sig.output_specs], sorted(ep.state_dict),
            sorted(ep.constants))


CASES = {"views": (Views, (1, 3, 4, 6)), "gru": (TinyGRU, (1, 5, 4)),
         "scalars": (Scalars, (1, 3, 4, 4))}


@pytest.mark.parametrize("case", ["views_float", "views_quantized", "gru_quantized",
                                  "scalars_float", "scalars_quantized"])
def test_in_place_conversion_matches_to_edge(case):
    cls, shape = CASES[case.split("_")[0]]
    model = cls()
    ep, x = _program(model, shape, quantized=case.endswith("quantized"),
                     aten_passes=case.startswith("gru"))
    assert needs_retrace(ep.graph_module) is None
    twin = copy.deepcopy(ep)
    twin.run_decompositions = lambda *args, **kwargs: twin  # decomposed already
    expected = to_edge(twin, compile_config=edge_compile_config())
    got = to_edge_in_place(ep, edge_compile_config())
    assert _structure(got) == _structure(expected)
    targets = {str(n.target) for n in got.exported_program().graph.nodes if n.op == "call_function"}
    assert not any(t.startswith("aten.") for t in targets)  # every op is an Edge op now
    torch.testing.assert_close(got.exported_program().module()(*x),
                               expected.exported_program().module()(*x), rtol=0, atol=0)


class ScalarAsTensor(nn.Module):
    def forward(self, x):
        return torch.ops.aten.add.Tensor(x, 2)


class MixedDtypes(nn.Module):
    def forward(self, x):
        return x * torch.arange(x.shape[-1])


@pytest.mark.parametrize("model, reason", [(ScalarAsTensor(), "scalar 2 as tensor argument"),
                                           (MixedDtypes(), "mixes input dtypes")])
def test_graphs_a_re_trace_would_change_go_to_to_edge(model, reason):
    ep, x = _program(model, (2, 3), quantized=False)
    assert reason in needs_retrace(ep.graph_module)
    assert to_edge_in_place(ep, edge_compile_config()) is None
    gm = export_module(model, x)
    edge = to_edge_program(gm, x)
    torch.testing.assert_close(edge.exported_program().module()(*x), model(*x))


class _CapitalisedRecurrent(nn.Module):
    """An LSTM and a head under capitalised attribute names (SpeechBrain's ``RNN``)."""

    def __init__(self):
        super().__init__()
        self.RNN = nn.LSTM(6, 8, batch_first=True)
        self.Head = nn.Linear(8, 3)

    def forward(self, x):
        return self.Head(self.RNN(x)[0][:, -1])


def test_inputs_of_capitalised_attributes_reach_the_edge_dialect():
    """Exporting the quantized reference names the LSTM's parameters ``p_rnn_...`` beside the
    targets ``p_RNN_...``; a graph no op of which needs a re-trace must still convert (ExecuTorch
    looks the signature's names up among the targets), with every parameter kept."""
    import mcu_npu

    torch.manual_seed(0)
    model, x = _CapitalisedRecurrent().eval(), (torch.randn(1, 5, 6),)
    prog = mcu_npu.compile(model, x, target="corstone-320",
                           calibration=[(torch.randn(1, 5, 6),) for _ in range(8)])
    assert prog.report.summary["ops_on_npu"] == prog.report.summary["ops_total"]
    got, want = prog.run(*x)[0], model(*x).detach()
    step = float((want.max() - want.min()) / 255)
    assert float((got - want).abs().max()) <= 8 * step  # weights present: not a zeroed LSTM
