"""InlineDisabledAutocast: a disabled autocast region (EfficientViT's attention) becomes the
ops it holds, computing the same; a region that enables autocast on the CPU stays. Compiled,
the region's matmuls run on the NPU and the host run matches the float64 reference."""

from __future__ import annotations

import pytest
import torch
from recurrent_cases import check_pass, count_ops
from torch import nn

import mcu_npu
from helpers import calibration_set, reference_output_steps, sqnr_holds
from mcu_npu.passes.aten import InlineDisabledAutocast
from mcu_npu.passes.aten.inline_disabled_autocast import WRAP_WITH_AUTOCAST
from mcu_npu.flow.export import export_module
from mcu_npu.quantization.exact import run_exact
from mcu_npu.report import Kernel

aten = torch.ops.aten
TARGETS = ["imxrt700", "corstone-300", "corstone-320"]


class LinearAttention(nn.Module):
    """EfficientViT's LiteMLA: ReLU linear attention in a region with autocast disabled."""

    def __init__(self, enabled: bool = False, nested: bool = False):
        super().__init__()
        self.qkv = nn.Conv2d(4, 12, 1)
        self.proj = nn.Conv2d(4, 4, 1)
        self.enabled, self.nested = enabled, nested

    def _attn(self, q, k, v):
        if self.nested:
            with torch.autocast(device_type="cuda", enabled=False):
                kv = k.transpose(-1, -2) @ v
        else:
            kv = k.transpose(-1, -2) @ v
        return q @ kv

    def forward(self, x):
        q, k, v = self.qkv(x).flatten(2).transpose(-1, -2).chunk(3, dim=-1)
        with torch.autocast(device_type=x.device.type, enabled=self.enabled):
            out = self._attn(torch.relu(q), torch.relu(k), v)
        out = out.float() if self.enabled else out  # bfloat16 where enabled
        return self.proj(out.transpose(-1, -2).reshape(x.shape))


def _example():
    return (torch.randn(1, 4, 6, 6, generator=torch.Generator().manual_seed(0)),)


@pytest.mark.parametrize("nested", [False, True])
def test_disabled_regions_become_their_ops(nested):
    result = check_pass(InlineDisabledAutocast(), LinearAttention(nested=nested).eval(),
                        _example())
    ops = count_ops(result.graph_module)
    assert result.modified and WRAP_WITH_AUTOCAST not in ops
    assert ops[aten.matmul.default] == 2
    assert not [n for n, _ in result.graph_module.named_children() if n.startswith("submod")]


def test_a_region_enabling_autocast_on_the_cpu_stays():
    gm = export_module(LinearAttention(enabled=True).eval(), _example())
    result = InlineDisabledAutocast()(gm)
    assert not result.modified and count_ops(gm)[WRAP_WITH_AUTOCAST] == 1


@pytest.mark.parametrize("target", TARGETS)
def test_disabled_region_compiles_onto_the_npu(target):
    example = _example()
    cal = calibration_set(example, n=8, seed=1)
    torch.manual_seed(0)
    prog = mcu_npu.compile(LinearAttention().eval(), example, target, calibration=cal)
    kernels = [(o.op, o.kernel) for o in prog.report.ops]
    assert ("aten.bmm", Kernel.NPU) in kernels
    assert all(k is Kernel.NPU for _, k in kernels), prog.report.ops
    acc = prog.report.accuracy
    assert sqnr_holds(acc["sqnr_db"], acc["reference_sqnr_db"]), acc
    step = reference_output_steps(prog.reference)[0]
    allowed = len(prog.report.ops)  # one output step per quantized op on the way
    for sample in cal:
        got, want = prog.run(*sample)[0], run_exact(prog.reference, *sample)
        assert float((got - want).abs().max()) / step <= allowed + 1e-3


@pytest.mark.parametrize("target", TARGETS)
def test_region_enabling_autocast_compiles_with_its_ops_on_the_cpu(target):
    """Its bfloat16 ops stay float on the CPU; the float64 reference runs through their
    casts (every floating type is a double there) and the accuracy contract holds."""
    example = _example()
    cal = calibration_set(example, n=8, seed=1)
    torch.manual_seed(0)
    prog = mcu_npu.compile(LinearAttention(enabled=True).eval(), example, target,
                           calibration=cal)
    kernels = [(o.op, o.kernel) for o in prog.report.ops]
    assert ("aten.bmm", Kernel.PORTABLE) in kernels and ("aten.bmm", Kernel.NPU) not in kernels
    acc = prog.report.accuracy
    assert sqnr_holds(acc["sqnr_db"], acc["reference_sqnr_db"]), acc
    assert run_exact(prog.reference, *example).dtype == torch.float32
