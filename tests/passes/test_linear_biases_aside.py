"""SetLinearBiasesAside / RestoreLinearBiases: with a quantized linear layer's int32 bias out of
its call while the Cortex-M layout passes re-trace, the linear re-traces as int8. Before,
it re-traced as int32: an activation with a second reader after a linear kept float bounds
on int8 values (a program far off its reference), and attention all on the CPU
failed the lowering (every CPU op fell back to float)."""

from __future__ import annotations

import torch
from torch import nn

import mcu_npu
from zoo.attention_spellings import spelling
from helpers import calibration_set, sqnr_db, sqnr_holds
from mcu_npu.runtime.pte import load


class _ReluReadTwice(nn.Module):
    """A linear whose output feeds a relu and, beside it, the add after: no fusion."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        y = torch.relu(y) + y
        return torch.clamp(y, -0.5, 0.5) + y


def _compile_on_cpu(module, x):
    return mcu_npu.compile(module.eval(), x, target="corstone-300",
                           calibration=calibration_set(x, n=8, seed=1),
                           operators_not_to_delegate=["*"])


def _sqnrs(module, prog, x):
    tests = calibration_set(x, n=8, seed=2)
    with torch.no_grad():
        want = torch.cat([module(*t).flatten() for t in tests])
        host = torch.cat([prog.run(*t)[0].flatten() for t in tests])
        ref = torch.cat([prog.reference(*t).flatten() for t in tests])
    return sqnr_db(want, host), sqnr_db(want, ref)


def test_activation_read_twice_after_a_linear_clamps_at_its_zero_point():
    torch.manual_seed(0)
    module, x = _ReluReadTwice(), (torch.randn(2, 8),)
    prog = _compile_on_cpu(module, x)
    operators = load(prog.buffer).operator_names
    # relu and clamp became clamps with quantized bounds; none runs on float bounds
    assert "aten::relu" not in operators, operators
    host, ref = _sqnrs(module, prog, x)
    assert sqnr_holds(host, ref), (host, ref)  # before: 16.9 against 40.6 dB


def test_attention_on_the_cpu_runs_on_the_cortex_m_kernels():
    module, x = spelling("sdpa_causal")
    prog = mcu_npu.compile(module, x, target="corstone-320",
                           calibration=calibration_set(x, seed=1),
                           operators_not_to_delegate=["*"])
    placement = {o.node: o.placement for o in prog.report.ops}
    bmm = [p for n, p in placement.items() if "bmm" in n]
    assert bmm == ["Cortex-M int8 kernel"] * 2, prog.report
    assert [p for n, p in placement.items() if "linear" in n] == ["Cortex-M int8 kernel"] * 2
    host, ref = _sqnrs(module, prog, x)
    assert sqnr_holds(host, ref), (host, ref)
