"""What the NPU leaves runs on the target's Cortex-M int8 kernels where ExecuTorch's Cortex-M
lowering takes it, and on portable kernels (with the reason in the report) where it does not:
on imxrt700 and on the Corstone targets, for the shapes its lowering used to crash on.

Each program is compared with its quantized reference element by element (in output steps),
loaded in ExecuTorch's own runtime, and, for the Cortex-M rules, checked against what the
lowering actually produced.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import mcu_npu
from helpers import assert_loads_in_executorch, calibration_set, reference_output_steps, \
    sqnr_holds
from mcu_npu.backend.cortex_m import cortex_m_rejection
from mcu_npu.report import Kernel
from zoo.cpu_fallback import CASES, ActAfterConv

TARGETS = ["imxrt700", "corstone-300", "corstone-320"]


def _compile(name, target, excluded=()):
    cls, shapes = CASES[name]
    torch.manual_seed(0)
    model = cls().eval()
    gen = torch.Generator().manual_seed(1)
    example = tuple(torch.randn(s, generator=gen) for s in shapes)
    cal = calibration_set(example, n=4, seed=2)
    prog = mcu_npu.compile(model, example, target, calibration=cal,
                           operators_not_to_delegate=excluded)
    return model, prog, cal


def _output_step(reference) -> float | None:
    """The first output's quantization step; for a float output computed from quantized
    tensors (a portable op last), the largest step of the graph; None when nothing is
    quantized."""
    out = [n for n in reference.graph.nodes if n.op == "output"][0].args[0]
    out = out[0] if isinstance(out, (list, tuple)) else out
    if "dequantize" in str(out.target):
        return reference_output_steps(reference)[0]
    scales = [float(n.args[1]) for n in reference.graph.nodes
              if n.op == "call_function" and "dequantize_per_tensor" in str(n.target)]
    return max(scales) if scales else None


def _assert_matches_reference(prog, cal):
    """The numerics contract: within one output step per quantized op on the way (the models
    here are a few ops deep), and the SQNR within 1 dB of the reference's."""
    step = _output_step(prog.reference)
    acc = prog.report.accuracy
    assert sqnr_holds(acc["sqnr_db"], acc["reference_sqnr_db"]), acc
    allowed = len(prog.report.ops)
    for sample in cal:
        got = prog.run(*sample)[0]
        want = prog.reference(*sample)
        want = want[0] if isinstance(want, (list, tuple)) else want
        assert got.shape == want.shape
        if step is None:  # nothing quantized: the program runs the float model's ops
            assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)
        else:
            err = float((got - want).abs().max()) / step
            assert err <= allowed + 1e-3, f"{err:.2f} output steps off the reference"
    want = prog.reference(*cal[0])
    want = want if isinstance(want, (list, tuple)) else [want]
    assert_loads_in_executorch(prog.buffer, cal[0], [w.detach() for w in want])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiles_and_runs_with_default_placement(name, target):
    _, prog, cal = _compile(name, target)
    _assert_matches_reference(prog, cal)


@pytest.mark.parametrize("target", ["imxrt700", "corstone-320"])  # Cortex-M33 and M85
@pytest.mark.parametrize("name", sorted(set(CASES) - {"crnn"}))  # a GRU: hundreds of CPU ops
def test_compiles_and_runs_with_everything_on_the_cpu(name, target):
    """Everything excluded from the NPU: each op is either a Cortex-M kernel or, where the
    plan says the lowering cannot take it, a portable kernel with that reason."""
    _, prog, cal = _compile(name, target, excluded=("*",))
    assert prog.report.summary["ops_on_npu"] == 0
    _assert_matches_reference(prog, cal)
    for op in prog.report.ops:
        if "the Cortex-M" in op.reason:  # planned portable
            assert op.kernel is Kernel.PORTABLE, op


@pytest.mark.parametrize("target", ["corstone-300"])
def test_planned_portable_nodes_are_named_with_the_reason(target):
    _, prog, _ = _compile("ceil_mode_pool", target, excluded=("*",))
    ops = {o.op: o for o in prog.report.ops}
    pool = ops["aten.max_pool2d_with_indices"] if "aten.max_pool2d_with_indices" in ops \
        else ops["aten.max_pool2d"]
    assert pool.kernel is Kernel.PORTABLE
    assert "excluded by operators_not_to_delegate; the Cortex-M max pooling kernel has no " \
           "ceil mode" == pool.reason
    conv = ops["aten.convolution"]
    assert conv.kernel is Kernel.CORTEX_M  # its neighbour's fallback costs it nothing


@pytest.mark.parametrize("target", ["corstone-300", "corstone-320"])
def test_corstone_runs_what_vela_leaves_on_cortex_m_int8_kernels(target):
    """An Ethos-U partition next to Cortex-M kernels: the host runs the mixed program and
    matches the reference."""

    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(3, 8, 3, padding=1)
            self.b = nn.Conv2d(8, 8, 3, padding=1)
            self.fc = nn.Linear(8 * 8 * 8, 6)

        def forward(self, x):
            y = torch.relu(self.b(torch.relu(self.a(x))))
            return self.fc(y.flatten(1))

    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    cal = calibration_set((x,), n=4, seed=1)
    torch.manual_seed(0)
    prog = mcu_npu.compile(Mixed().eval(), (x,), target, calibration=cal,
                           operators_not_to_delegate=["aten.convolution"])
    kernels = {o.op: o.kernel for o in prog.report.ops}
    assert kernels["aten.convolution"] is Kernel.CORTEX_M
    assert kernels["aten.linear"] is Kernel.NPU
    _assert_matches_reference(prog, cal)


def test_rules_match_what_the_lowering_does():
    """``cortex_m_rejection`` on ATen nodes: the cases the explicit-layout lowering refuses."""
    def nodes(model, *shapes):
        gm = torch.export.export(model, tuple(torch.randn(s) for s in shapes)) \
            .module(check_guards=False)
        return {n.name: n for n in gm.graph.nodes if n.op == "call_function"}

    assert cortex_m_rejection(nodes(nn.Conv1d(2, 2, 3), (1, 2, 8))["conv1d"]) is None
    assert "rank 3" in cortex_m_rejection(nodes(nn.Conv1d(2, 2, 3), (2, 8))["conv1d"])
    assert "no ConvTranspose1d" in cortex_m_rejection(
        nodes(nn.ConvTranspose1d(2, 2, 3), (1, 2, 8))["conv_transpose1d"])
    assert cortex_m_rejection(nodes(nn.MaxPool2d(2), (1, 2, 8, 8))["max_pool2d"]) is None
    assert "ceil mode" in cortex_m_rejection(
        nodes(nn.MaxPool2d(3, 2, ceil_mode=True), (1, 2, 8, 8))["max_pool2d"])
    assert "dilation" in cortex_m_rejection(
        nodes(nn.MaxPool2d(3, 1, dilation=2), (1, 2, 8, 8))["max_pool2d"])
    assert "rank 3" in cortex_m_rejection(nodes(nn.AvgPool2d(2), (2, 8, 8))["avg_pool2d"])
    assert "divisor override" in cortex_m_rejection(
        nodes(nn.AvgPool2d(2, divisor_override=3), (1, 2, 8, 8))["avg_pool2d"])


@pytest.mark.parametrize("target", TARGETS)
def test_in_place_sums_run_on_the_npu_or_on_cortex_m_kernels(target):
    """``out += ...`` (torch.export keeps ``add_``): on the NPU by default; kept off it, the
    sums of two tensors run on Cortex-M kernels, and one with a number (``out += 0``) gets
    the number as a quantized constant, as ``out + 0`` does."""
    _, prog, cal = _compile("in_place_sums", target)
    assert prog.report.summary["ops_on_npu"] == prog.report.summary["ops_total"]
    _assert_matches_reference(prog, cal)
    _, prog, cal = _compile("in_place_sums", target, excluded=("add",))
    adds = [o for o in prog.report.ops if o.op == "aten.add.Tensor"]
    assert len(adds) == 3 and all(o.kernel is not Kernel.NPU for o in adds)
    assert [o.kernel for o in adds[:2]] == [Kernel.CORTEX_M] * 2, adds
    _assert_matches_reference(prog, cal)


def _operators(buffer: bytes) -> set[str]:
    from executorch.exir._serialize._program import deserialize_pte_binary

    plan = deserialize_pte_binary(buffer).program.execution_plan[0]
    return {op.name for op in plan.operators}


NO_PORTABLE_KERNEL = {"aten::silu", "aten::hardswish", "aten::hardsigmoid", "aten::prelu"}
"""Ops the NPU takes whole that ExecuTorch's portable kernels lack."""


@pytest.mark.parametrize("target", ["imxrt700", "corstone-300"])
@pytest.mark.parametrize("act, op", [(nn.SiLU(), "aten.silu"), (nn.Hardswish(), "aten.hardswish"),
                                     (nn.Hardsigmoid(), "aten.hardsigmoid"),
                                     (nn.PReLU(8), "aten.prelu")])
def test_activations_the_npu_takes_whole_are_decomposed_on_the_cpu(act, op, target):
    """Kept off the NPU after an NPU convolution, each runs as the Cortex-M / portable
    kernels of its parts: the program calls no op without a kernel and holds the contract."""
    torch.manual_seed(0)
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    cal = calibration_set((x,), n=4, seed=2)
    prog = mcu_npu.compile(ActAfterConv(act).eval(), (x,), target, calibration=cal,
                           operators_not_to_delegate=[op])
    assert not _operators(prog.buffer) & NO_PORTABLE_KERNEL, _operators(prog.buffer)
    assert {o.op for o in prog.report.ops if o.kernel is Kernel.NPU} >= {"aten.convolution"}
    _assert_matches_reference(prog, cal)
