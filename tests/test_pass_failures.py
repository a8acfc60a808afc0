"""Our passes never fail a compile: an ATen pass that raises (here one made to raise after a
half-done edit) is skipped, the graph as it was before it, and the report says so; where
RefreshStrides raises, every op stays on the CPU with the failure as its reason. A value read
out of a run-time tensor (``item``) no longer makes RefreshStrides raise."""

from __future__ import annotations

import torch

import mcu_npu
from helpers import calibration_set, sqnr_holds
from zoo.public import measure
from mcu_npu.passes.aten import ConvertDivToMul
from mcu_npu.passes.edge import refresh_strides
from mcu_npu.report import Kernel


class ConvDiv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.c(x)) / 4.0


def _holds_the_contract(prog, model):
    """The host run within the numerics contract over 8 inputs."""
    figures = measure(prog, model, calibration_set((torch.randn(1, 3, 8, 8),), seed=5))
    return figures["finite"] and sqnr_holds(figures["host_sqnr"], figures["ref_sqnr"])


def test_an_aten_pass_that_raises_is_skipped_and_reported(monkeypatch):
    def half_done(self, gm):
        div = next(n for n in gm.graph.nodes if n.target == torch.ops.aten.div.Tensor)
        div.target = torch.ops.aten.mul.Tensor  # a wrong edit, then the failure
        raise RuntimeError("made to fail")

    monkeypatch.setattr(ConvertDivToMul, "call", half_done)
    torch.manual_seed(0)
    inputs = (torch.randn(1, 3, 8, 8),)
    model = ConvDiv().eval()
    prog = mcu_npu.compile(model, inputs, target="corstone-320",
                           calibration=calibration_set(inputs))
    assert any("ConvertDivToMul failed" in n and "made to fail" in n
               for n in prog.report.notes), prog.report.notes
    assert any(o.op.startswith("aten.div") for o in prog.report.ops), prog.report  # undone
    assert prog.report.summary["partitions"] == 1
    assert _holds_the_contract(prog, model)


def test_refresh_strides_that_raises_leaves_every_op_on_the_cpu(monkeypatch):
    def fails(self, n):
        raise RuntimeError("made to fail")

    monkeypatch.setattr(refresh_strides._Refresh, "run_node", fails)
    torch.manual_seed(0)
    inputs = (torch.randn(1, 3, 8, 8),)
    model = ConvDiv().eval()
    prog = mcu_npu.compile(model, inputs, target="corstone-320",
                           calibration=calibration_set(inputs))
    assert prog.report.ops and all(o.kernel is not Kernel.NPU for o in prog.report.ops)
    assert all("RefreshStrides failed" in o.reason and "made to fail" in o.reason
               for o in prog.report.ops), [o.reason for o in prog.report.ops]
    assert _holds_the_contract(prog, model)


class FilledFromRunTime(torch.nn.Module):
    """A tensor filled with a value read out of a run-time tensor: the compile's earlier
    propagations leave data-dependent symbols unbound, which RefreshStrides raised on
    (``PendingUnbackedSymbolNotFound``)."""

    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = self.c(x)
        return torch.relu(y) + torch.full((1, 8, 8, 8), y.amax().item())


def test_a_value_read_at_run_time_compiles():
    torch.manual_seed(0)
    inputs = (torch.randn(1, 3, 8, 8),)
    prog = mcu_npu.compile(FilledFromRunTime().eval(), inputs, target="corstone-320",
                           calibration=calibration_set(inputs))
    on_npu = [o.op for o in prog.report.ops if o.kernel is Kernel.NPU]
    assert "aten.convolution" in on_npu, prog.report
    assert not any("RefreshStrides" in (o.reason or "") for o in prog.report.ops)
