import pytest
import torch
from hypothesis import given
from recurrent_cases import (
    PROPERTY_SETTINGS, Case, assert_linear_counts, assert_reexports, cases, check_decomposition, count_ops,
    export_module,
)
from torch import nn

from mcu_npu.errors import UnsupportedModelError
from mcu_npu.passes import DecomposeLSTM, ProjSizeNotSupportedError

aten = torch.ops.aten


@PROPERTY_SETTINGS
@given(cases())
def test_decomposed_lstm_equals_torch(case: Case):
    check_decomposition(DecomposeLSTM(), case.build(nn.LSTM), case.inputs(num_states=2))


def test_linear_counts():
    case = Case(4, 6, 3, True, False, True, 4, 2, True)
    gm = check_decomposition(DecomposeLSTM(), case.build(nn.LSTM), case.inputs(num_states=2))
    assert_linear_counts(gm, 3, 2, 4)
    assert count_ops(gm)[aten.lstm.input] == 0


def test_reexport_keeps_weights_as_parameters():
    case = Case(3, 5, 2, True, True, False, 3, 2, True)
    args = case.inputs(num_states=2)
    gm = check_decomposition(DecomposeLSTM(), case.build(nn.LSTM), args)
    assert_reexports(gm, args)


@pytest.mark.parametrize("bias", [True, False])
def test_proj_size_is_rejected_clearly(bias):
    gm = export_module(nn.LSTM(4, 6, proj_size=3, bias=bias).eval(), (torch.randn(2, 1, 4),))
    with pytest.raises(ProjSizeNotSupportedError, match="proj_size") as info:
        DecomposeLSTM()(gm)
    assert isinstance(info.value, NotImplementedError)
    assert isinstance(info.value, UnsupportedModelError)
