"""Public architectures whose group normalization and resizes used to stay on the CPU:
compiled for the Ethos-U85, every op runs on the NPU in one partition, and the host run's
SQNR against float is within 1 dB of the quantized reference's over all outputs of the
model library's 8 held-out inputs."""

from __future__ import annotations

import pytest

from zoo import public
from helpers import sqnr_holds


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    pytest.param(name, marks=public.same_compile(name, "corstone-320"))
    for name in ["efficientnet_b0_gn", "mobilevit_xxs"]])
def test_model_runs_wholly_on_ethos_u85_within_contract(name):
    _, prog, _, m = public.compiled(name, "corstone-320")
    s = prog.report.summary
    assert s["ops_on_npu"] == s["ops_total"] and s["partitions"] == 1, prog.report
    assert m["finite"] and sqnr_holds(m["host_sqnr"], m["ref_sqnr"]), m
