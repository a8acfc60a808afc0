import pytest
import torch
from recurrent_cases import Case, check_pass_after, count_ops
from torch import nn

from mcu_npu.passes import DecomposeGRU, DecomposeLSTM, SplitGRUByLayers
from mcu_npu.passes.aten import StackByConcat

aten = torch.ops.aten


def stack(module: nn.Module, args: tuple, *passes):
    return check_pass_after(StackByConcat(), module, args, passes, aten.unsqueeze.default)


@pytest.mark.parametrize("batch_first, batch", [(True, 1), (True, 3), (False, 2)])
def test_unrolled_outputs_are_gathered_without_a_copy_per_step(batch_first, batch):
    case = Case(4, 6, 2, True, True, batch_first, 5, batch, False)
    gm, before, modified = stack(case.build(nn.GRU), case.inputs(), SplitGRUByLayers(),
                                 DecomposeGRU())
    assert modified and before >= 5 * 2 * 2
    # what remains unsqueezed: the final states (stacked over layers on a new dim 0)
    assert count_ops(gm)[aten.unsqueeze.default] <= before - 5 * 2 * 2


class LastAxis(nn.Module):
    def forward(self, a, b):
        return torch.cat([a.unsqueeze(-1), b.unsqueeze(-1)], -1), \
            torch.cat([a.unsqueeze(0), b.reshape(1, 2, 3)], 0)


def test_last_axis_and_mixed_axes_are_left_alone():
    args = (torch.randn(2, 3), torch.randn(2, 3))
    gm, before, modified = stack(LastAxis(), args)
    assert not modified and count_ops(gm)[aten.unsqueeze.default] == before == 3


def test_lstm_outputs():
    case = Case(3, 5, 1, False, True, False, 4, 2, False)
    gm, _, modified = stack(case.build(nn.LSTM), case.inputs(), DecomposeLSTM())
    assert modified
