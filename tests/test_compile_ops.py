"""Every converter operator through the whole flow: compile for imxrt700, the op lands in an
NPU partition, and the host run of the .pte matches the quantized reference within one
output quantization step."""

from __future__ import annotations

import pytest
import torch

import mcu_npu
from helpers import as_list, calibration_set, reference_output_steps
from zoo.op_cases import CASES


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


@pytest.mark.parametrize("target", ["imxrt700", "corstone-300"])
def test_a_view_of_an_input_that_leaves_the_npu_stays_on_the_cpu(target):
    """A partition output that is only its input reshaped gives the NPU nothing to compute,
    and Vela leaves it out of the command stream's outputs: such a view stays on the CPU,
    while the op after it runs on the NPU."""
    torch.manual_seed(0)

    class Branches(torch.nn.Module):
        def forward(self, x):
            y = x.view(2, 5, 6)
            return y, torch.sigmoid(y)

    inputs = (torch.randn(2, 30),)
    prog = mcu_npu.compile(Branches(), inputs, target=target, calibration=calibration_set(inputs))
    placements = {o.op: o.placement for o in prog.report.ops}
    reasons = {o.op: o.reason for o in prog.report.ops}
    assert not placements["aten.view_copy"].startswith("NPU"), prog.report
    assert "nothing for the NPU to compute" in reasons["aten.view_copy"]
    assert placements["aten.sigmoid"].startswith("NPU partition"), prog.report
    expected = as_list(prog.reference(*inputs))
    got = prog.run(*inputs)
    for e, g, step in zip(expected, got, reference_output_steps(prog.reference)):
        assert float((g - e).abs().max()) / step <= 1.0 + 1e-3
