"""i.MX RT700 as one target: what the Neutron NPU rejects runs as Cortex-M int8 kernels.

Outputs of the host-run .pte are compared with the quantized reference (PyTorch), element by
element in output steps, so a wrong dim order or padding at an NPU / Cortex-M boundary fails.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import mcu_npu
from helpers import calibration_set, reference_output_steps, sqnr_close, sqnr_db
from mcu_npu.report import Kernel


def _compile(model, shape, excluded=(), seed=0):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed + 100))
    cal = calibration_set((x,), n=8, seed=seed)
    prog = mcu_npu.compile(model.eval(), (x,), target="imxrt700", calibration=cal,
                           operators_not_to_delegate=excluded)
    return prog, cal


def _assert_matches_reference(prog, cal, steps_allowed=1):
    step = reference_output_steps(prog.reference)[0]
    for sample in cal[:4]:
        got = prog.run(*sample)[0]
        want = prog.reference(*sample)
        want = want[0] if isinstance(want, (list, tuple)) else want
        assert got.shape == want.shape
        err = float((got - want).abs().max()) / step
        assert err <= steps_allowed + 1e-3, f"{err:.2f} output steps off the reference"


def _assert_within_contract(prog, cal):
    """No float compute left, SQNR within 1 dB of the reference's, outputs within one step."""
    assert not [o for o in prog.report.ops if o.placement == "portable float kernel"]
    acc = prog.report.accuracy
    assert sqnr_close(acc["sqnr_db"], acc["reference_sqnr_db"]), acc
    _assert_matches_reference(prog, cal)


def _ops(prog):
    return {o.op: o for o in prog.report.ops}


class Mixed(nn.Module):
    """conv | gelu (kept off the NPU by the user: not approximated, ``flow.approximate``) |
    conv | softmax over 4096 (outside Neutron's limits) | linear (excluded by the user)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 16 * 16, 10)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        y = nn.functional.gelu(y)
        y = torch.relu(self.c2(y))
        y = torch.softmax(y.flatten(1), -1)
        return self.fc(y)


@pytest.fixture(scope="module")
def mixed():
    torch.manual_seed(0)
    return Mixed().eval()


def test_rejected_ops_run_as_cortex_m_kernels(mixed):
    prog, cal = _compile(mixed, (1, 3, 16, 16), excluded=["linear", "gelu"])
    ops, s = _ops(prog), prog.report.summary
    assert s["partitions"] == 2
    for op in ("aten.gelu", "aten._softmax", "aten.linear"):
        assert ops[op].kernel is Kernel.CORTEX_M and ops[op].placement == "Cortex-M int8 kernel"
    assert "operators_not_to_delegate" in ops["aten.gelu"].reason
    assert "2040 channels" in ops["aten._softmax"].reason
    assert "operators_not_to_delegate" in ops["aten.linear"].reason
    assert ops["aten.convolution"].kernel is Kernel.NPU
    _assert_within_contract(prog, cal)


def test_cortex_m_rules_only(mixed):
    prog, cal = _compile(mixed, (1, 3, 16, 16), excluded=["*"])
    s = prog.report.summary
    assert s["partitions"] == 0 and s["ops_on_npu"] == 0
    kernels = {o.op: o.kernel for o in prog.report.ops}
    assert set(kernels.values()) <= {Kernel.CORTEX_M, Kernel.PORTABLE}
    assert all(k is Kernel.CORTEX_M for op, k in kernels.items() if op != "aten.view_copy")
    _assert_within_contract(prog, cal)


def test_program_has_no_float_compute_where_cortex_m_has_a_kernel(mixed):
    prog, _ = _compile(mixed, (1, 3, 16, 16), excluded=["linear", "gelu"])
    program = mcu_npu.load(prog.buffer)._program
    names = {op for op in program.operator_names}
    assert {"cortex_m::quantized_linear", "cortex_m::softmax",
            "cortex_m::quantized_activation"} <= names, names
    assert not {n for n in names if n.startswith("aten::") and
                n.split("::")[1] in ("convolution", "linear", "_softmax", "gelu", "add")}


# --- boundaries: dim order and padding ---------------------------------------------------

class Boundary(nn.Module):
    """Non-square maps, distinct channel counts, so a transposed layout cannot pass."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.a = nn.Conv2d(3, 5, (3, 2), padding=(1, 0))
        self.b = nn.Conv2d(5, 7, 3, padding=1)
        self.c = nn.Conv2d(7, 4, 1)

    def forward(self, x):
        y = torch.relu(self.a(x))
        if self.mode == "pad":
            y = nn.functional.pad(y, (2, 1, 0, 3), value=0.25)
        if self.mode == "channels_last":
            y = y.contiguous(memory_format=torch.channels_last)
        if self.mode in ("gelu", "channels_last"):
            y = nn.functional.gelu(y)
        y = self.b(y)
        return self.c(y)


@pytest.mark.parametrize("mode,excluded", [
    ("gelu", ["gelu"]),                  # NPU -> Cortex-M activation -> NPU
    ("channels_last", ["gelu"]),         # user-given dim order at the boundary
    ("pad", ["constant_pad_nd"]),        # NPU -> Cortex-M pad -> NPU
    ("plain", ["aten_convolution_default_1"]),  # NPU conv -> Cortex-M conv -> NPU conv
    ("pad", ["aten_convolution_default"]),      # Cortex-M conv -> NPU pad + conv
])
def test_boundary_layouts(mode, excluded):
    torch.manual_seed(1)
    prog, cal = _compile(Boundary(mode), (1, 3, 9, 6), excluded=list(excluded), seed=1)
    kernels = {o.kernel for o in prog.report.ops}
    assert Kernel.NPU in kernels and Kernel.CORTEX_M in kernels, prog.report
    _assert_matches_reference(prog, cal)


# --- the Cortex-M ops on the host, one by one -----------------------------------------

class Single(nn.Module):
    def __init__(self, fn, *mods):
        super().__init__()
        self.fn = fn
        self.mods = nn.ModuleList(mods)

    def forward(self, x):
        return self.fn(self.mods, x)


CASES = {
    "conv": ((1, 3, 8, 7), lambda m, x: m[0](x), [nn.Conv2d(3, 6, 3, stride=2, padding=1)]),
    "conv_relu": ((1, 3, 8, 8), lambda m, x: torch.relu(m[0](x)), [nn.Conv2d(3, 6, 3)]),
    "depthwise": ((1, 4, 8, 8), lambda m, x: m[0](x), [nn.Conv2d(4, 8, 3, groups=4, padding=1)]),
    "transpose_conv": ((1, 4, 5, 5), lambda m, x: m[0](x),
                       [nn.ConvTranspose2d(4, 3, 3, stride=2)]),
    "linear": ((2, 24), lambda m, x: m[0](x), [nn.Linear(24, 10)]),
    "add": ((1, 4, 5, 5), lambda m, x: x + x * 0.5, []),
    "mul": ((1, 4, 5, 5), lambda m, x: x * torch.sigmoid(x), []),
    "max_pool": ((1, 4, 8, 8), lambda m, x: nn.functional.max_pool2d(x, 2), []),
    "avg_pool": ((1, 4, 8, 8), lambda m, x: nn.functional.avg_pool2d(x, 2), []),
    "softmax": ((2, 12), lambda m, x: torch.softmax(x, -1), []),
    "tanh": ((2, 12), lambda m, x: torch.tanh(x), []),
    "bmm": ((2, 3, 4), lambda m, x: torch.bmm(x, x.transpose(1, 2)), []),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cortex_m_op_on_host(case):
    shape, fn, mods = CASES[case]
    torch.manual_seed(2)
    prog, cal = _compile(Single(fn, *mods), shape, excluded=["*"], seed=2)
    assert prog.report.summary["ops_on_cortex_m"] >= 1, prog.report
    program = mcu_npu.load(prog.buffer)._program
    assert any(n.startswith("cortex_m::quantized") or n.startswith("cortex_m::softmax")
               for n in program.operator_names), program.operator_names
    _assert_matches_reference(prog, cal)


class Gate(nn.Module):
    """linear | softmax | linear, all three left to the CPU."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.b(torch.softmax(self.a(x), -1))


def test_cpu_op_reads_a_fixed_range_output_as_it_is():
    """A CPU kernel reading softmax's fixed-range int8 output (scale 1/256) takes it as it is:
    no requantize to a range of its own, which would round the values a second time."""
    prog, cal = _compile(Gate(), (1, 16), excluded=("*",))
    qd = torch.ops.quantized_decomposed
    nodes = [n for n in prog.reference.graph.nodes if n.op == "call_function"]
    requantized = [n for n in nodes if n.target == qd.quantize_per_tensor.default
                   and isinstance(n.args[0], torch.fx.Node)
                   and n.args[0].target == qd.dequantize_per_tensor.default]
    assert not requantized, requantized
    (linear,) = [n for n in nodes if n.target == torch.ops.aten.linear.default
                 and n.args[0].args[0].args[0].target == torch.ops.aten.softmax.int]
    assert linear.args[0].args[1] == 1.0 / 256  # the dequantize it reads: softmax's scale
    assert {_ops(prog)[op].placement for op in ("aten.linear", "aten._softmax")} == \
        {"Cortex-M int8 kernel"}, prog.report
    _assert_within_contract(prog, cal)
