import torch
from recurrent_cases import Case, check_pass_after, count_ops
from torch import nn

from mcu_npu.passes import DecomposeGRU, DecomposeLSTM, DecomposeRNN, SplitGRUByLayers
from mcu_npu.passes.aten import FoldLinearOfZeros

aten = torch.ops.aten


def fold(module: nn.Module, args: tuple, *passes):
    return check_pass_after(FoldLinearOfZeros(), module, args, passes, aten.linear.default)


def test_zero_initial_state_costs_no_first_matmul():
    case = Case(4, 6, 2, True, True, True, 5, 1, False)
    gm, before, modified = fold(case.build(nn.GRU), case.inputs(), SplitGRUByLayers(),
                                DecomposeGRU())
    assert modified
    assert count_ops(gm)[aten.linear.default] == before - 4  # 2 layers x 2 directions


def test_lstm_and_rnn_first_steps():
    case = Case(3, 5, 1, False, True, False, 4, 1, False)
    gm, before, _ = fold(case.build(nn.LSTM), case.inputs(), DecomposeLSTM())
    assert count_ops(gm)[aten.linear.default] == before - 1
    gm, before, _ = fold(case.build(nn.RNN), case.inputs(), DecomposeRNN())
    assert count_ops(gm)[aten.linear.default] == before - 1


def test_given_state_batches_and_bias_free_linears_are_kept():
    for case, extra in ((Case(4, 6, 1, False, True, True, 3, 1, True), {}),
                        (Case(4, 6, 1, False, True, True, 3, 2, False), {}),
                        (Case(4, 6, 1, False, False, True, 3, 1, False), {})):
        _, _, modified = fold(case.build(nn.GRU, **extra), case.inputs(), DecomposeGRU())
        assert not modified


def test_linear_of_full_zero():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 4)

        def forward(self, x):
            return self.fc(torch.full((1, 3), 0.0)) + x

    gm, _, modified = fold(M().eval(), (torch.randn(1, 4),))
    assert modified and count_ops(gm)[aten.linear.default] == 0
