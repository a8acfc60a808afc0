"""The quantizable recurrent modules under torch.export + prepare_qat_pt2e with the project's
quantizer: fake-quantized training steps run and the converted program tracks float."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_qat_pt2e

from mcu_npu import nn as qnn
from mcu_npu.estimate.metrics import sqnr_db
from mcu_npu.quantization import NpuQuantizer


class Head(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer
        self.fc = nn.Linear(layer.hidden_size * (2 if layer.bidirectional else 1), 3)

    def forward(self, x):
        return self.fc(self.layer(x)[0][:, -1])


@pytest.mark.parametrize("make", [
    lambda: qnn.GRU.from_float(nn.GRU(6, 8, num_layers=2, batch_first=True)),
    lambda: qnn.RNN.from_float(nn.RNN(6, 8, batch_first=True, bidirectional=True)),
    lambda: qnn.LSTM.from_float(nn.LSTM(6, 8, batch_first=True)),
], ids=["gru", "rnn", "lstm"])
def test_module_trains_under_pt2e_qat_and_converts(make):
    torch.manual_seed(0)
    model = Head(make()).eval()
    x = torch.randn(2, 5, 6)
    graph = torch.export.export(model, (x,)).module(check_guards=False)
    prepared = prepare_qat_pt2e(graph, NpuQuantizer(is_qat=True))
    assert any("FakeQuantize" in type(m).__name__ for m in prepared.modules())
    opt = torch.optim.SGD(prepared.parameters(), lr=1e-3)
    for _ in range(3):
        opt.zero_grad()
        prepared(torch.randn(2, 5, 6)).pow(2).mean().backward()
        opt.step()
    converted = convert_pt2e(prepared)
    with torch.no_grad():
            assert sqnr_db(model(x), converted(x)) > 10
