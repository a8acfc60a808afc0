"""Recurrent models end to end on imxrt700: the GRU / RNN / LSTM layers are split and
decomposed by default, quantized with one scale per recurrent state, and every compute op
lands on the NPU; the host run of the .pte meets the numerics contract."""

from __future__ import annotations

import pytest
import torch

from mcu_npu.quantization.exact import run_exact
from mcu_npu.estimate.metrics import sqnr_db

from helpers import assert_loads_in_executorch, sqnr_holds
from zoo.model_compiles import RECURRENT, recurrent, same_compile

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=same_compile("recurrent", name)) for name in RECURRENT])
def test_recurrent_model_runs_on_the_npu_within_contract(name):
    model, prog, tests = recurrent(name)
    s = prog.report.summary
    assert s["ops_on_cpu"] == 0 and s["partitions"] == 1, prog.report
    assert not any("gru" in o.op or "lstm" in o.op or "rnn" in o.op for o in prog.report.ops)
    with torch.no_grad():
        floats = torch.cat([model(x).flatten() for x in tests])
        refs = torch.cat([run_exact(prog.reference, x).flatten() for x in tests])
    runs = torch.cat([prog.run(x)[0].flatten() for x in tests])
    assert sqnr_holds(sqnr_db(floats, runs), sqnr_db(floats, refs))
    assert_loads_in_executorch(prog.buffer, tests[0], prog.run(tests[0]))
