"""A split whose outputs reach the NPU along two ways, one of them through the CPU (SHViT's
partial attention, MobileViTv2's query / key / value): every output of the split leaves its
partition int8, so the model compiles, the split stays on the NPU and the program matches
its quantized reference."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import mcu_npu
from helpers import calibration_set, reference_output_steps
from mcu_npu.report import Kernel

TARGETS = ["imxrt700", "corstone-300", "corstone-320"]


class SplitAroundCpu(nn.Module):
    """One part of a split goes through an op the NPU leaves to the CPU (``tanh``, excluded
    here; SHViT's group norm has no NPU conversion), the others join it again."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Conv2d(3, 12, 1)
        self.proj = nn.Conv2d(12, 8, 1)

    def forward(self, x):
        a, b, c = self.qkv(x).split([4, 4, 4], dim=1)
        return self.proj(torch.cat([torch.tanh(a), b, torch.relu(c)], dim=1))


@pytest.mark.parametrize("target", TARGETS)
def test_split_read_around_a_cpu_op_keeps_its_outputs_int8(target):
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    cal = calibration_set((x,), n=8, seed=1)
    torch.manual_seed(0)
    prog = mcu_npu.compile(SplitAroundCpu().eval(), (x,), target, calibration=cal,
                           operators_not_to_delegate=["tanh"])
    kernels = {o.op: o.kernel for o in prog.report.ops}
    assert kernels["aten.tanh"] is not Kernel.NPU
    for op in ("aten.convolution", "aten.split_with_sizes_copy", "aten.cat"):
        assert kernels[op] is Kernel.NPU, prog.report.ops
    assert prog.report.summary["partitions"] == 2
    step = reference_output_steps(prog.reference)[0]
    for sample in cal:
        got, want = prog.run(*sample)[0], prog.reference(*sample)
        assert float((got - want).abs().max()) <= step * 1.001  # within one output step
