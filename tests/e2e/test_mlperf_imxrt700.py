"""The MLPerf Tiny models and the digits example compiled for imxrt700: one NPU partition
holding every compute op, host runs within the numerics contract, a saved and reloaded .pte
giving bit-identical results, and the digits classifier accurate from its .pte."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import mcu_npu
from mcu_npu.quantization.exact import run_exact
from mcu_npu.estimate.metrics import sqnr_db
from mcu_npu.models.mlperf_tiny import MODELS

from zoo import model_compiles
from device_checks import assert_neutron_io_matches
from helpers import assert_loads_in_executorch
from zoo.model_compiles import same_compile

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=same_compile("mlperf", name, "imxrt700")) for name in MODELS])
def test_mlperf_tiny_model_on_imxrt700(name, tmp_path):
    model, prog, tests = model_compiles.mlperf(name, "imxrt700")
    s = prog.report.summary
    assert s["partitions"] == 1 and s["ops_on_cpu"] == 0 and s["ops_on_npu"] == s["ops_total"]
    with torch.no_grad():
        floats = torch.cat([model(*t).flatten() for t in tests])
        refs = torch.cat([run_exact(prog.reference, *t).flatten() for t in tests])
    runs = [prog.run(*t)[0] for t in tests]
    assert sqnr_db(floats, torch.cat([r.flatten() for r in runs])) >= sqnr_db(floats, refs) - 1
    assert_loads_in_executorch(prog.buffer, tests[0], prog.run(*tests[0]))
    assert_neutron_io_matches(prog.buffer, prog.host_data)
    loaded = mcu_npu.load(prog.save(tmp_path / f"{name}.pte"))
    for t, r in zip(tests[:3], runs):
        assert torch.equal(loaded.run(*t)[0], r)


def test_digits_classifier_from_its_pte(tmp_path):
    sys.path.insert(0, str(EXAMPLES))
    try:
        import digits
    finally:
        sys.path.remove(str(EXAMPLES))
    model, example, calibration = digits.calibrated()
    prog = mcu_npu.compile(model, example, target="imxrt700", calibration=calibration,
                           npu_compiler="reference")
    loaded = mcu_npu.load(prog.save(tmp_path / "digits.pte"))
    assert_loads_in_executorch(prog.buffer, example, loaded.run(*example))
    images, labels = digits.held_out()
    hits = sum(int(loaded.run(images[i:i + 1])[0].argmax()) == int(labels[i])
               for i in range(len(images)))
    assert hits / len(images) >= 0.95
