"""Public architectures whose group normalization and resizes used to stay on the CPU:
compiled for the Ethos-U85, every op runs on the NPU in one partition, and the host run's
SQNR against float is within 1 dB of the quantized reference's over all outputs of the
model library's 8 held-out inputs."""

from __future__ import annotations

import pytest

import mcu_npu
import model_library


@pytest.mark.slow
@pytest.mark.parametrize("name", ["efficientnet_b0_gn", "mobilevit_xxs"])
def test_model_runs_wholly_on_ethos_u85_within_contract(name):
    model, example, calibration, tests = model_library.build(name)
    prog = mcu_npu.compile(model, example, target="corstone-320", calibration=calibration)
    s = prog.report.summary
    assert s["ops_on_npu"] == s["ops_total"] and s["partitions"] == 1, prog.report
    m = model_library.measure(prog, model, tests)
    assert m["finite"] and m["host_sqnr"] >= m["ref_sqnr"] - 1.0, m
