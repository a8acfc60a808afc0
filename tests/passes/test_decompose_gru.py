import pytest
import torch
from hypothesis import given
from recurrent_cases import (
    PROPERTY_SETTINGS, Case, assert_linear_counts, assert_reexports, assert_same, cases, check_decomposition,
    count_ops, export_module,
)
from torch import nn

from mcu_npu.passes import DecomposeGRU, SplitGRUByLayers

aten = torch.ops.aten


@PROPERTY_SETTINGS
@given(cases())
def test_decomposed_gru_equals_torch(case: Case):
    check_decomposition(DecomposeGRU(), case.build(nn.GRU), case.inputs())


@pytest.mark.parametrize("layers,bidirectional,seq_len", [(1, False, 1), (2, True, 5), (3, False, 4)])
def test_one_input_projection_per_layer_and_direction(layers, bidirectional, seq_len):
    case = Case(6, 8, layers, bidirectional, True, False, seq_len, 2, False)
    gm = check_decomposition(DecomposeGRU(), case.build(nn.GRU), case.inputs())
    d = 2 if bidirectional else 1
    assert_linear_counts(gm, layers, d, seq_len)
    ops = count_ops(gm)
    assert ops[aten.sigmoid.default] == ops[aten.sub.Tensor] == layers * d * seq_len
    assert ops[aten.gru.input] == 0


def test_reexport_keeps_weights_as_parameters():
    case = Case(5, 7, 2, True, True, True, 4, 2, True)
    args = case.inputs()
    gm = check_decomposition(DecomposeGRU(), case.build(nn.GRU), args)
    assert_reexports(gm, args)


def test_decompose_after_split():
    case = Case(5, 6, 3, True, False, False, 3, 2, True)
    module, args = case.build(nn.GRU), case.inputs()
    gm = export_module(module, args)
    assert SplitGRUByLayers()(gm).modified
    assert DecomposeGRU()(gm).modified
    assert_linear_counts(gm, 3, 2, 3)
    with torch.no_grad():
        assert_same(gm(*args), module(*args))


def test_training_dropout_between_layers_is_kept():
    torch.manual_seed(0)
    module = nn.GRU(4, 5, num_layers=3, dropout=0.5).train()
    x = torch.randn(3, 2, 4)
    gm = export_module(module, (x,))
    DecomposeGRU()(gm)
    assert count_ops(gm)[aten.dropout.default] == 2
    torch.manual_seed(7)
    expected = module(x)
    torch.manual_seed(7)
    assert_same(gm(x), expected)


def test_graph_without_gru_is_unchanged():
    gm = export_module(nn.Linear(3, 4), (torch.randn(2, 3),))
    before = str(gm.graph)
    assert not DecomposeGRU()(gm).modified
    assert str(gm.graph) == before
