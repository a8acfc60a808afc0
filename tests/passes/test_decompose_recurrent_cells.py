"""DecomposeRecurrentCells: GRU, LSTM and RNN cells as elementary ops, equal to the cells."""

import pytest
import torch
from torch import nn

from mcu_npu.flow.export import export_module
from mcu_npu.passes.aten import DecomposeRecurrentCells

CELLS = [lambda: nn.GRUCell(6, 8), lambda: nn.LSTMCell(6, 8), lambda: nn.RNNCell(6, 8),
         lambda: nn.RNNCell(6, 8, nonlinearity="relu"), lambda: nn.GRUCell(6, 8, bias=False)]


class Step(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, x, h, c):
        if isinstance(self.cell, nn.LSTMCell):
            return self.cell(x, (h, c))
        return self.cell(x, h)


@pytest.mark.parametrize("make", CELLS, ids=["gru", "lstm", "rnn_tanh", "rnn_relu", "gru_nobias"])
def test_cell_decomposes_exactly(make):
    torch.manual_seed(0)
    model = Step(make()).eval()
    args = (torch.randn(2, 6), torch.randn(2, 8), torch.randn(2, 8))
    graph = export_module(model, args)
    assert DecomposeRecurrentCells()(graph).modified
    cells = [n for n in graph.graph.nodes
             if n.op == "call_function" and "_cell" in str(n.target)]
    assert not cells, cells
    with torch.no_grad():
        want, got = model(*args), graph(*args)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
