import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from recurrent_cases import PROPERTY_SETTINGS, Case, assert_same, cases, count_ops, export_module
from torch import nn

from mcu_npu.passes import DecomposeGRU, DecomposeLSTM, SplitGRUByLayers
from mcu_npu.passes.aten import FoldSelectOfCat

aten = torch.ops.aten


class LastStep(nn.Module):
    """A recurrent layer whose output is read at one time step only."""

    def __init__(self, rnn: nn.Module, step: int):
        super().__init__()
        self.rnn, self.step = rnn, step

    def forward(self, *args):
        y = self.rnn(*args)[0]
        return y[:, self.step] if self.rnn.batch_first else y[self.step]


def fold(module: nn.Module, args: tuple, *passes):
    gm = export_module(module, args)
    with torch.no_grad():
        expected = module(*args)
        for p in (*passes, FoldSelectOfCat()):
            p(gm)
        assert_same(gm(*args), expected)
    return gm


@PROPERTY_SETTINGS
@given(cases(), st.integers(-16, 15))
def test_last_step_readout_equals_torch(case: Case, step: int):
    step = step % case.seq_len
    fold(LastStep(case.build(nn.GRU), step), case.inputs(), SplitGRUByLayers(), DecomposeGRU())


@pytest.mark.parametrize("bidirectional", [False, True])
def test_unread_steps_are_removed(bidirectional):
    case = Case(4, 6, 2, bidirectional, True, True, 7, 1, False)
    gm = fold(LastStep(case.build(nn.GRU), -1), case.inputs(), SplitGRUByLayers(), DecomposeGRU())
    ops = count_ops(gm)
    # layer 0 keeps its whole output (layer 1 reads it); layer 1 keeps only what the last
    # step needs: every forward step, and one backward step
    assert ops[aten.unsqueeze.default] == 7 * (2 if bidirectional else 1)
    assert ops[aten.tanh.default] == (14 + 7 + 1 if bidirectional else 14)


def test_lstm_last_step():
    case = Case(3, 5, 1, True, False, False, 4, 2, True)
    fold(LastStep(case.build(nn.LSTM), 0), case.inputs(num_states=2), DecomposeLSTM())


def test_cat_read_elsewhere_is_kept():
    class Both(nn.Module):
        def forward(self, a, b):
            y = torch.cat([a, b], 1)
            return y[:, 0], y * 2

    args = (torch.randn(2, 3), torch.randn(2, 4))
    gm = fold(Both(), args)
    assert count_ops(gm)[aten.cat.default] == 1


def test_select_of_plain_cat():
    class Pick(nn.Module):
        def forward(self, a, b, c):
            return torch.cat([a, b], 1)[:, 4], torch.cat([a, c], 0)[-1]

    args = (torch.randn(2, 3), torch.randn(2, 4), torch.randn(5, 3))
    gm = fold(Pick(), args)
    assert count_ops(gm)[aten.cat.default] == 0
