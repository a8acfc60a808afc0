"""Every converter operator through the whole flow: compile for imxrt700, the op lands in an
NPU partition, and the host run of the .pte matches the quantized reference within one
output quantization step."""

from __future__ import annotations

import pytest
import torch

import mcu_npu
from helpers import as_list, calibration_set, reference_output_steps
from op_cases import CASES


@pytest.mark.parametrize("name,factory,shapes", CASES, ids=[c[0] for c in CASES])
def test_single_op_runs_on_npu_and_matches_reference(name, factory, shapes):
    torch.manual_seed(0)
    module = factory().eval()
    inputs = tuple(torch.randn(s) for s in shapes)
    prog = mcu_npu.compile(module, inputs, target="imxrt700", npu_compiler="reference",
                           calibration=calibration_set(inputs))
    placements = {o.node: o.placement for o in prog.report.ops}
    assert placements and all(p.startswith("NPU partition") for p in placements.values()), \
        prog.report
    expected = as_list(prog.reference(*inputs))
    got = prog.run(*inputs)
    assert len(got) == len(expected)
    for e, g, step in zip(expected, got, reference_output_steps(prog.reference)):
        assert g.shape == e.shape
        assert float((g - e).abs().max()) / step <= 1.0 + 1e-3
