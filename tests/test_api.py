"""The public API end to end: partitions around CPU ops, exclusions, save/load, report."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

import mcu_npu
from helpers import calibration_set, reference_output_steps
from mcu_npu.backend.compile_spec import NpuCompileSpec
from mcu_npu.estimate.metrics import sqnr_db
from mcu_npu.report import Kernel, OpPlacement


class FloorBetweenConvs(nn.Module):
    """Two conv blocks with an op no NPU converter handles (floor) between them."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(8, 6, 3, padding=1), nn.ReLU())

    def forward(self, x):
        return self.b(torch.floor(self.a(x) * 4.0))


@pytest.fixture(scope="module")
def floor_program():
    torch.manual_seed(0)
    model = FloorBetweenConvs().eval()
    x = torch.randn(1, 3, 10, 10)
    prog = mcu_npu.compile(model, (x,), npu_compiler="reference",
                           calibration=calibration_set((x,)))
    return model, x, prog


def test_cpu_op_splits_the_npu_into_two_partitions(floor_program):
    model, x, prog = floor_program
    ops = {o.op: o for o in prog.report.ops}
    assert prog.report.summary["partitions"] == 2
    assert ops["aten.floor"].placement == "portable float kernel"  # no Cortex-M kernel either
    assert ops["aten.floor"].kernel is Kernel.PORTABLE
    assert "no NPU conversion" in ops["aten.floor"].reason
    convs = [o for o in prog.report.ops if o.op == "aten.convolution"]
    assert {o.placement for o in convs} == {"NPU partition 0", "NPU partition 1"}
    assert all(o.kernel is Kernel.NPU for o in convs)
    assert "aten.floor" in str(prog.report) and "no NPU conversion" in str(prog.report)
    # correct results: the host run matches the quantized reference within one output step
    step = reference_output_steps(prog.reference)[0]
    assert float((prog.run(x)[0] - prog.reference(x)).abs().max()) <= step * 1.001


def test_saved_program_reloads_bit_identical_with_its_report(floor_program, tmp_path):
    _, x, prog = floor_program
    path = prog.save(tmp_path / "m.pte")
    loaded = mcu_npu.load(path)
    assert torch.equal(loaded.run(x)[0], prog.run(x)[0])
    assert [o.placement for o in loaded.report.ops] == [o.placement for o in prog.report.ops]
    assert [o.kernel for o in loaded.report.ops] == [o.kernel for o in prog.report.ops]
    assert all(isinstance(o.kernel, Kernel) for o in loaded.report.ops)
    assert loaded.report.summary["ops_on_npu"] == prog.report.summary["ops_on_npu"]


def test_summary_has_the_documented_fields(floor_program):
    s = floor_program[2].report.summary
    for key in ("target", "npu_compiler", "ops_total", "ops_on_npu", "ops_on_cpu",
                "partitions", "npu_ops_fraction", "macs"):
        assert key in s
    assert s["target"] == "imxrt700" and s["npu_compiler"] == "reference"
    assert s["ops_on_npu"] + s["ops_on_cpu"] == s["ops_total"]
    assert s["macs"] == 10 * 10 * (8 * 3 * 9 + 6 * 8 * 9)
    assert json.loads(floor_program[2].report.to_json())["summary"]["ops_total"] == s["ops_total"]


def test_report_json_holds_kernel_values():
    op = OpPlacement("n", "aten.floor", "portable float kernel", "portable")
    assert op.kernel is Kernel.PORTABLE
    assert json.loads(json.dumps({"kernel": op.kernel})) == {"kernel": "portable"}
    with pytest.raises(ValueError):
        OpPlacement("n", "aten.floor", "somewhere", "gpu")


def test_operators_not_to_delegate_keeps_the_op_on_the_cpu():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    x = torch.randn(1, 3, 8, 8)
    prog = mcu_npu.compile(model.eval(), (x,), npu_compiler="reference",
                           calibration=calibration_set((x,)),
                           operators_not_to_delegate=["aten.convolution"])
    ops = {o.op: o for o in prog.report.ops}
    assert ops["aten.convolution"].placement == "Cortex-M int8 kernel"
    assert "operators_not_to_delegate" in ops["aten.convolution"].reason
    assert ops["aten.linear"].placement.startswith("NPU")
    assert sqnr_db(prog.reference(x), prog.run(x)[0]) > 35


def test_no_calibration_warns_and_still_compiles():
    model = nn.Sequential(nn.Linear(6, 3)).eval()
    with pytest.warns(UserWarning, match="calibration"):
        prog = mcu_npu.compile(model, (torch.randn(2, 6),), npu_compiler="reference")
    assert prog.report.summary["ops_on_npu"] == 1


def test_targets_lists_presets():
    assert "imxrt700" in mcu_npu.targets()


def test_compile_spec_round_trip():
    spec = NpuCompileSpec(target="imxrt700", npu_compiler="reference")
    assert NpuCompileSpec.from_compile_specs(spec.to_compile_specs()) == spec


def test_exporting_a_recurrent_layer_says_nothing_the_user_cannot_act_on():
    """nn.GRU re-lists its parameters on every call, which torch.export reports as tensor
    attributes assigned during export; the export stage keeps that off the user's terminal."""
    import warnings

    from mcu_npu.flow.export import export_module

    class Gru(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = torch.nn.GRU(4, 6, batch_first=True)

        def forward(self, x):
            return self.gru(x)[0]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm = export_module(Gru(), (torch.randn(1, 3, 4),))
    assert not [w for w in caught if "_flat_weights" in str(w.message)]
    assert any(n.op == "call_function" for n in gm.graph.nodes)
