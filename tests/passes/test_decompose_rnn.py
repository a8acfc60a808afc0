import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from recurrent_cases import (
    PROPERTY_SETTINGS, Case, assert_linear_counts, assert_reexports, cases, check_decomposition, count_ops,
)
from torch import nn

from mcu_npu.passes import DecomposeRNN

aten = torch.ops.aten


@PROPERTY_SETTINGS
@given(cases(), st.sampled_from(["tanh", "relu"]))
def test_decomposed_rnn_equals_torch(case: Case, nonlinearity: str):
    check_decomposition(DecomposeRNN(), case.build(nn.RNN, nonlinearity=nonlinearity), case.inputs())


@pytest.mark.parametrize("nonlinearity,activation", [("tanh", aten.tanh.default), ("relu", aten.relu.default)])
def test_linear_counts_and_activation(nonlinearity, activation):
    case = Case(4, 6, 2, True, True, False, 5, 2, False)
    gm = check_decomposition(DecomposeRNN(), case.build(nn.RNN, nonlinearity=nonlinearity), case.inputs())
    assert_linear_counts(gm, 2, 2, 5)
    ops = count_ops(gm)
    assert ops[activation] == 2 * 2 * 5
    assert ops[aten.rnn_tanh.input] == ops[aten.rnn_relu.input] == 0


def test_reexport_keeps_weights_as_parameters():
    case = Case(3, 5, 2, False, True, True, 4, 1, True)
    args = case.inputs()
    gm = check_decomposition(DecomposeRNN(), case.build(nn.RNN, nonlinearity="relu"), args)
    assert_reexports(gm, args)
