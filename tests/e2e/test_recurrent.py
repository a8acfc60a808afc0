"""Recurrent models end to end on imxrt700: the GRU / RNN / LSTM layers are split and
decomposed by default, quantized with one scale per recurrent state, and every compute op
lands on the NPU; the host run of the .pte meets the numerics contract."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import mcu_npu
from mcu_npu.quantization.exact import run_exact
from mcu_npu.report.metrics import sqnr_db

from helpers import assert_loads_in_executorch, sqnr_holds

pytestmark = pytest.mark.slow


class KeywordSpotter(nn.Module):
    """Conv1d 40->64 over [1, 49, 40] MFCC frames, a 2-layer GRU 64->64, Linear 64->12."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(40, 64, 3, padding=1)
        self.gru = nn.GRU(64, 64, num_layers=2, batch_first=True)
        self.fc = nn.Linear(64, 12)

    def forward(self, x):
        y = torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)
        out, _ = self.gru(y)
        return self.fc(out[:, -1])


class Recurrent(nn.Module):
    """One recurrent layer (GRU, RNN or LSTM) and a linear head on the last step."""

    def __init__(self, layer: nn.Module, features: int, classes: int = 4):
        super().__init__()
        self.layer = layer
        self.fc = nn.Linear(features, classes)

    def forward(self, x):
        out = self.layer(x)[0]
        return self.fc(out[:, -1])


MODELS = {
    "kws_gru2": (KeywordSpotter, (1, 49, 40)),
    "bigru": (lambda: Recurrent(nn.GRU(16, 32, batch_first=True, bidirectional=True), 64),
              (1, 20, 16)),
    "rnn_tanh2": (lambda: Recurrent(nn.RNN(12, 24, num_layers=2, batch_first=True), 24),
                  (1, 16, 12)),
    "rnn_relu": (lambda: Recurrent(nn.RNN(12, 24, nonlinearity="relu", batch_first=True), 24),
                 (1, 12, 12)),
    "lstm": (lambda: Recurrent(nn.LSTM(12, 24, batch_first=True), 24), (1, 16, 12)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_recurrent_model_runs_on_the_npu_within_contract(name):
    factory, shape = MODELS[name]
    torch.manual_seed(0)
    model = factory().eval()
    g = torch.Generator().manual_seed(1)
    calibration = [(torch.randn(shape, generator=g),) for _ in range(16)]
    prog = mcu_npu.compile(model, calibration[0], calibration=calibration,
                           npu_compiler="reference")
    s = prog.report.summary
    assert s["ops_on_cpu"] == 0 and s["partitions"] == 1, prog.report
    assert not any("gru" in o.op or "lstm" in o.op or "rnn" in o.op for o in prog.report.ops)
    tests = [torch.randn(shape, generator=g) for _ in range(4)]
    with torch.no_grad():
        floats = torch.cat([model(x).flatten() for x in tests])
        refs = torch.cat([run_exact(prog.reference, x).flatten() for x in tests])
    runs = torch.cat([prog.run(x)[0].flatten() for x in tests])
    assert sqnr_holds(sqnr_db(floats, runs), sqnr_db(floats, refs))
    assert_loads_in_executorch(prog.buffer, tests[0], prog.run(tests[0]))
