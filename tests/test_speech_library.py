"""Speech models nobody here wrote compile, load in ExecuTorch's runtime and hold the
numerics contract on the three SoC targets: a representative few of a public speech library
(``zoo.speech``: SpeechBrain, random weights with settled BatchNorm statistics, 40
filterbank features x 100 frames, 8 calibration samples), the contract measured over all
outputs of 8 held-out inputs. ``benchmarks/model_library.py --set speech`` runs the
whole list."""

from __future__ import annotations

import pytest

from zoo import speech
from helpers import assert_loads_in_executorch, sqnr_holds
from mcu_npu.report import Kernel

TARGETS = speech.TARGETS
MODELS = speech.TEST_SET


@pytest.mark.slow
@pytest.mark.parametrize("name,target", [
    pytest.param(name, target, marks=speech.same_compile(name, target))
    for name in MODELS for target in TARGETS])
def test_compiles_loads_and_holds_the_contract(name, target):
    model, prog, tests, figures = speech.compiled(name, target)
    report, summary = prog.report, prog.report.summary
    assert summary["ops_on_npu"] > 0, report
    for op in report.ops:  # every CPU op says why
        assert op.kernel is Kernel.NPU or op.reason, op
    if target in MODELS[name]:
        cpu = [(o.node, o.op, o.reason) for o in report.ops if o.kernel is not Kernel.NPU]
        assert not cpu and summary["partitions"] == 1, (summary["partitions"], cpu[:5])
    assert figures["finite"]
    assert sqnr_holds(figures["host_sqnr"], figures["ref_sqnr"]), figures
    out = prog.run(*tests[0])
    assert_loads_in_executorch(prog.buffer, tests[0], [o.detach() for o in out])
