"""ApproximateGELU: each form is exactly the formula it names (1e-5), within its stated
distance of the erf GELU; the tanh form is exact for ``gelu(x, approximate="tanh")``.
Through the flow, on imxrt700 (no Neutron GELU) a transformer's MLP with GELU runs wholly on
the NPU in one partition where the approximation holds the contract, the verdict a note in
the report; where it does not, the GELU stays exact on the CPU; a target whose NPU runs
GELU is not measured at all."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mcu_npu
from helpers import calibration_set
from mcu_npu.flow.export import export_module
from mcu_npu.passes.aten import ApproximateGELU
from mcu_npu.report import Kernel

aten = torch.ops.aten


class Gelu(nn.Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, approximate=self.approximate)


def _rewritten(form, approximate="none"):
    x = torch.linspace(-8, 8, 4001).reshape(1, 4001)
    result = ApproximateGELU(form)(export_module(Gelu(approximate).eval(), (x,)))
    assert result.modified
    targets = [n.target for n in result.graph_module.graph.nodes if n.op == "call_function"]
    assert aten.gelu.default not in targets
    with torch.no_grad():
        return x, result.graph_module(x)


def test_sigmoid_form_is_x_times_sigmoid_of_1_702_x():
    x, y = _rewritten("sigmoid")
    torch.testing.assert_close(y, x * torch.sigmoid(1.702 * x), rtol=1e-5, atol=1e-6)
    assert float((y - F.gelu(x)).abs().max()) < 0.021


def test_tanh_form_is_the_tanh_gelu():
    x, y = _rewritten("tanh", approximate="tanh")
    torch.testing.assert_close(y, F.gelu(x, approximate="tanh"), rtol=1e-5, atol=1e-6)
    assert float((y - F.gelu(x)).abs().max()) < 5e-4
    _, z = _rewritten("tanh")  # an erf GELU gets the same ops
    assert torch.equal(y, z)


def test_unknown_form_is_refused():
    with pytest.raises(ValueError, match="unknown GELU approximation"):
        ApproximateGELU("cubic")


class Mlp(nn.Module):
    """A transformer block's MLP: linear, GELU, linear, residual."""

    def __init__(self, dim=16, hidden=32):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))


def _compile(model, target, scale=1.0, shift=0.0):
    torch.manual_seed(0)
    x = torch.randn(1, 8, 16)
    samples = [tuple(t * scale + shift for t in s) for s in calibration_set((x,), n=8)]
    return mcu_npu.compile(model.eval(), samples[0], target=target, calibration=samples)


def _gelu_notes(prog):
    return [n for n in prog.report.notes if "GELU" in n]


@pytest.mark.slow
def test_mlp_runs_on_neutron_with_the_approximation_and_says_so():
    torch.manual_seed(0)
    prog = _compile(Mlp(), "imxrt700")
    s = prog.report.summary
    cpu = [(o.op, o.reason) for o in prog.report.ops if o.kernel is not Kernel.NPU]
    assert not cpu and s["partitions"] == 1, cpu
    (note,) = _gelu_notes(prog)
    assert "x * sigmoid(1.702 x)" in note and "exact" in note
    assert s["sqnr_db"] >= s["reference_sqnr_db"] - 1.0


class DeepNegativeGelu(nn.Module):
    """GELU read where it is small (inputs in [-4, -1]): the sigmoid form's error of up to
    0.02 is most of the signal there."""

    def forward(self, x):
        return F.gelu(x)


@pytest.mark.slow
def test_an_approximation_that_costs_the_contract_is_not_kept():
    prog = _compile(DeepNegativeGelu(), "imxrt700", scale=0.3, shift=-2.5)
    (note,) = _gelu_notes(prog)
    verdict = _verdict(note)
    assert "kept exact" in note, note
    assert verdict["sigmoid"] < verdict["exact"] - 1.0 and \
        verdict["tanh"] < verdict["exact"] - 1.0, note
    assert [o.kernel for o in prog.report.ops if o.op == "aten.gelu"] == [Kernel.CORTEX_M]


def _verdict(note: str) -> dict:
    """The dB figures of a GELU note: {"exact": .., "sigmoid": .., "tanh": ..}."""
    import re

    return {k: float(v) for k, v in re.findall(r"(exact|sigmoid|tanh) (-?[\d.]+|inf) dB",
                                               note)}


@pytest.mark.slow
def test_an_npu_with_gelu_keeps_it_unmeasured():
    prog = _compile(Mlp(), "corstone-320")
    assert not _gelu_notes(prog)
    gelu = [o for o in prog.report.ops if o.op == "aten.gelu"]
    assert gelu and all(o.kernel is Kernel.NPU for o in gelu)



@pytest.mark.slow
def test_a_gelu_kept_off_the_npu_is_not_approximated():
    torch.manual_seed(0)
    x = torch.randn(1, 8, 16)
    samples = calibration_set((x,), n=8)
    prog = mcu_npu.compile(Mlp().eval(), samples[0], target="imxrt700", calibration=samples,
                           operators_not_to_delegate=["gelu"])
    assert not _gelu_notes(prog)
    assert [o.reason for o in prog.report.ops if o.op == "aten.gelu"] == \
        ["excluded by operators_not_to_delegate"]
