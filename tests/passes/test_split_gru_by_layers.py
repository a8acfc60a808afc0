import torch
from hypothesis import given
from recurrent_cases import PROPERTY_SETTINGS, Case, assert_same, cases, check_pass, count_ops, export_module
from torch import nn

from mcu_npu.passes import SplitGRUByLayers

aten = torch.ops.aten


@PROPERTY_SETTINGS
@given(cases())
def test_split_gru_equals_torch(case: Case):
    result = check_pass(SplitGRUByLayers(), case.build(nn.GRU), case.inputs())
    assert result.modified == (case.num_layers > 1)
    grus = [n for n in result.graph_module.graph.nodes if n.target == aten.gru.input]
    assert len(grus) == case.num_layers
    assert all(n.args[4] == 1 for n in grus)


def test_layers_are_chained_with_their_own_weights():
    case = Case(4, 5, 3, True, True, False, 3, 2, True)
    gm = check_pass(SplitGRUByLayers(), case.build(nn.GRU), case.inputs()).graph_module
    grus = [n for n in gm.graph.nodes if n.target == aten.gru.input]
    for layer, node in enumerate(grus):
        assert {w.target for w in node.args[2]} == {
            f"{k}_l{layer}{s}" for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh") for s in ("", "_reverse")
        }
    assert count_ops(gm)[aten.cat.default] == 1


def test_training_dropout_between_layers_is_kept():
    torch.manual_seed(0)
    module = nn.GRU(4, 5, num_layers=3, dropout=0.5).train()
    x = torch.randn(3, 2, 4)
    gm = export_module(module, (x,))
    assert SplitGRUByLayers()(gm).modified
    assert count_ops(gm)[aten.dropout.default] == 2
    torch.manual_seed(3)
    expected = module(x)
    torch.manual_seed(3)
    assert_same(gm(x), expected)


def test_split_graph_reexports():
    case = Case(4, 5, 2, False, True, True, 3, 2, False)
    module, args = case.build(nn.GRU), case.inputs()
    gm = export_module(module, args)
    SplitGRUByLayers()(gm)
    ep = torch.export.export(gm, args)
    assert sum(n.target == aten.gru.input for n in ep.graph.nodes) == 2
    with torch.no_grad():
        assert_same(ep.module()(*args), module(*args))


def test_two_stacked_multi_layer_grus():
    """Splitting the first GRU rewires the second one's input: each call is read when its
    turn comes, not before the first is split."""
    torch.manual_seed(0)

    class Stacked(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.GRU(5, 2, num_layers=2, bidirectional=True, batch_first=True)
            self.b = nn.GRU(4, 2, num_layers=2, bidirectional=True, batch_first=True)

        def forward(self, x):
            return self.b(self.a(x)[0])[0]

    result = check_pass(SplitGRUByLayers(), Stacked().eval(), (torch.randn(2, 3, 5),))
    assert result.modified
    assert count_ops(result.graph_module)[aten.gru.input] == 4
