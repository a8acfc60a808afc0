"""The NPU side never fails a compile: a node whose conversion fails, a partition its NPU
compiler fails on, a Cortex-M lowering that fails — each is forced here with a test double —
and the compile still succeeds with those nodes on the CPU, the error as their reason in the
report, and the program computing what its quantized reference computes. Also: no member of
an NPU partition lacks a conversion (the plan, the partitioner and the converter agree)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import mcu_npu
from helpers import assert_loads_in_executorch, calibration_set, reference_output_steps
from mcu_npu.partition.support import VerdictCategory
from mcu_npu.report import Kernel
from mcu_npu.tflite import registry
from mcu_npu.tflite.describe import op_names
from mcu_npu.tflite.ops_aliases import aten

TARGETS = ["imxrt700", "corstone-300", "corstone-320"]


class ConvMulConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        y = torch.relu(self.a(x))
        return self.b(y * y)


class ConvFloorMulConv(ConvMulConv):
    """Two partitions: the floor between them has no NPU conversion."""

    def forward(self, x):
        y = torch.floor(torch.relu(self.a(x)))
        return self.b(y * y)


def _compile(target, cls=ConvMulConv):
    torch.manual_seed(0)
    model = cls().eval()
    example = (torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1)),)
    cal = calibration_set(example, n=8, seed=2)
    return model, mcu_npu.compile(model, example, target, calibration=cal), cal


def _mul_op(prog):
    (mul,) = [o for o in prog.report.ops if o.op == "aten.mul.Tensor"]
    return mul


def _assert_matches_reference(prog, cal):
    """Every output within one output step per op of the model (a few ops deep) of the
    quantized reference, and the program loads in ExecuTorch's runtime."""
    (step,) = reference_output_steps(prog.reference)
    for sample in cal:
        got, want = prog.run(*sample)[0], prog.reference(*sample)
        assert float((got - want).abs().max()) <= len(prog.report.ops) * step + 1e-6
    assert_loads_in_executorch(prog.buffer, cal[0], [prog.reference(*cal[0]).detach()])


@pytest.fixture
def failing_mul_conversion(monkeypatch):
    """The mul converter raises a bug's exception (a test double)."""
    entry = registry.REGISTRY[aten.mul.Tensor]

    def broken(ctx, node):
        raise KeyError("a converter bug")

    monkeypatch.setitem(registry.REGISTRY, aten.mul.Tensor,
                        dataclasses.replace(entry, convert=broken))


@pytest.mark.parametrize("target", TARGETS)
def test_a_node_whose_conversion_fails_runs_on_the_cpu(target, failing_mul_conversion):
    _, prog, cal = _compile(target)
    mul = _mul_op(prog)
    assert mul.kernel is not Kernel.NPU
    assert "converting it for the NPU failed" in mul.reason and "a converter bug" in mul.reason
    on_npu = [o for o in prog.report.ops if o.kernel is Kernel.NPU]
    assert {o.op for o in on_npu} >= {"aten.convolution"}  # the rest stays on the NPU
    _assert_matches_reference(prog, cal)


@pytest.mark.parametrize("target", TARGETS)
def test_a_partition_the_npu_compiler_fails_on_runs_on_the_cpu(target, monkeypatch):
    """The NPU compiler (a double around the real one) fails on any partition holding a MUL:
    that partition's nodes are planned again on the CPU, the other one is compiled."""
    from mcu_npu.backend import delegate as backend

    real = backend.get_compiler

    class FailsOnMul:
        def __init__(self, inner):
            self.inner = inner

        def compile(self, model, target):
            if "MUL" in op_names(model.buffer):
                raise RuntimeError("the NPU compiler crashed")
            return self.inner.compile(model, target)

    monkeypatch.setattr(backend, "get_compiler", lambda *a: FailsOnMul(real(*a)))
    _, prog, cal = _compile(target, ConvFloorMulConv)
    mul = _mul_op(prog)
    assert mul.kernel is not Kernel.NPU
    assert "the NPU compiler failed on its partition" in mul.reason
    assert "the NPU compiler crashed" in mul.reason
    assert all("MUL" not in p.tflite_ops for p in prog.report.partitions)
    npu = [o for o in prog.report.ops if o.kernel is Kernel.NPU]
    assert prog.report.summary["partitions"] == 1  # the first conv and its relu
    assert npu and {o.op for o in npu} <= {"aten.convolution", "aten.relu"}
    _assert_matches_reference(prog, cal)


@pytest.mark.parametrize("target", ["corstone-300", "corstone-320"])
def test_a_failing_cortex_m_lowering_leaves_the_cpu_ops_to_portable_kernels(
        target, monkeypatch, failing_mul_conversion):
    from mcu_npu.flow import lower as api

    def broken(edge, core):
        raise KeyError(1)

    monkeypatch.setattr(api, "lower_to_cortex_m", broken)
    _, prog, cal = _compile(target)
    mul = _mul_op(prog)
    assert mul.kernel is Kernel.PORTABLE
    assert "lowering to the Cortex-M kernels failed" in mul.reason and "KeyError" in mul.reason
    _assert_matches_reference(prog, cal)


@pytest.mark.parametrize("target", TARGETS)
def test_every_partition_member_has_a_conversion(target):
    """The plan, the partitioner and the converter agree: every compute node of every NPU
    partition has a registry entry that accepts it."""
    from mcu_npu.partition.plan import plan_program
    from mcu_npu.flow.edge import to_edge_program

    _, prog, cal = _compile(target)
    edge = to_edge_program(prog.reference, cal[0])
    plan = plan_program(edge.exported_program(), target)
    nodes = {n.name: n for n in edge.exported_program().graph.nodes}
    members = [name for part in plan.partitions for name in part]
    assert members
    for name in members:
        entry = registry.lookup(nodes[name].target)
        assert entry is not None and entry.rejection(nodes[name], plan.target) is None, name
    assert not [n for n in plan.nodes if n.verdict.category is VerdictCategory.CONVERSION]


class StrideFourStem(nn.Module):
    """A 7x7 stride-4 stem (PoolFormer's): Vela 5's Ethos-U55 support check passes it, then
    the compiler fails on it ("Non-passthrough operation (Conv2D) could not run on NPU")
    without naming the operator."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 7, stride=4, padding=2)
        self.b = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        y = torch.relu(self.stem(x))
        return self.b(y * y)


def test_a_real_npu_compiler_failure_naming_no_operator_moves_only_its_node():
    """No test double: Vela itself fails on the stem. Checked alone, the stem is the node it
    fails on; the stem (and the ReLU fused into it) runs on the CPU with Vela's message, the
    rest stays on the NPU."""
    torch.manual_seed(0)
    model = StrideFourStem().eval()
    example = (torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1)),)
    cal = calibration_set(example, n=8, seed=2)
    prog = mcu_npu.compile(model, example, "corstone-300", calibration=cal)
    cpu = [o for o in prog.report.ops if o.kernel is not Kernel.NPU]
    assert sorted(o.op for o in cpu) == ["aten.convolution", "aten.relu"], cpu  # relu: fused
    for op in cpu:
        assert "the NPU compiler failed on it: Non-passthrough operation (Conv2D)" in op.reason
    assert {o.op for o in prog.report.ops if o.kernel is Kernel.NPU} >= {"aten.mul.Tensor"}
    _assert_matches_reference(prog, cal)
