"""Every converter operator with int16 activations (TFLite's 16x8 kernels) through the whole
flow on corstone-300 with Vela: the op lands in an NPU partition, it runs int16 when its
operator converts in int16 (``@operator(int16=...)``) and otherwise stays int8 with the
reason in ``report.precision["kept_int8"]``, and the host run of the .pte matches the
quantized reference within one output quantization step (for an int16 output, one step of
its int16 scale).

Each case compiles once (``_compiled``) and three tests read it. ``CI_CASES`` covers every
operator family; the other cases of ``op_cases.CASES`` carry ``@pytest.mark.slow``.
"""

from __future__ import annotations

import functools

import pytest
import torch

import mcu_npu
from helpers import as_list, calibration_set, reference_output_steps, sqnr_db, sqnr_holds
from zoo.op_cases import CASES

TARGET = "corstone-300"

CI_CASES = {
    "conv2d_stride2_pad1", "conv2d_pad_explicit", "conv2d_depthwise", "conv2d_grouped",
    "conv1d_pad_stride", "conv_transpose2d_pad", "conv2d_clamp", "linear_relu",
    "add_broadcast", "add_scalar", "add_const", "sub_broadcast", "mul_scalar",
    "mul_broadcast_4d", "relu6", "leaky_relu", "sigmoid", "tanh", "hardsigmoid", "hardswish",
    "softmax_channels", "max_pool2d_stride_pad", "avg_pool2d_pad_exclude",
    "adaptive_avg_pool2d_2x2", "mean_keepdim", "cat_4d_channels", "permute",
    "slice_4d_channels", "select", "split", "constant_pad_nd_value", "mm",
}
"""One or more cases of each operator family; every other case runs under ``slow``."""

NOT_ON_NPU_IN_INT8 = {"slice_step"}
"""Cases Vela leaves (partly) to the CPU in int8 already (a strided slice over the
channels), so placement is not asserted for them."""

FLOAT_OUTPUT_IN_INT8 = {"conv_transpose2d_outpad"}
"""Cases that run as a float CPU kernel in int8 already (Vela refuses the TRANSPOSE_CONV
output shape): nothing int16 to check."""

STAYS_INT8 = {"mm", "bmm", "prelu", "prelu_2d", "hardswish", "upsample_bilinear2d",
              "upsample_bilinear2d_align_corners", "upsample_nearest2d", "elu", "elu_4d"}
"""Cases whose operator has no 16x8 conversion (Vela takes no int16 BATCH_MATMUL, PRELU or
HARD_SWISH; the resizes and ELU convert in int8 only): the op stays int8 inside the
partition, with a requantize around it."""

PARTLY_INT8 = {"log_of_sigmoid": {"aten.log"}}
"""Cases where one operator has no 16x8 conversion (LOG converts in int8 only) and the
others do: that operator stays int8, the others run in int16."""

TABLE_OPS = {"sigmoid", "tanh", "softmax_channels", "softmax_last"}
"""Cases whose int16 output comes from LiteRT's interpolated tables (LOGISTIC, TANH: 2
sigmoid(2x) - 1 from a 256-entry table; SOFTMAX: exp and 1 / (1 + x) tables): the kernel's
own approximation of the exact function, a few 1e-4 (tanh 3 steps of 1/32768, softmax on
64-wide rows 15). Their contract is 2^-10 (32 int16 steps, an eighth of the int8 step on
the same fixed range); a conversion error (a wrong scale, layout or axis) is far larger."""
TABLE_STEPS = 32

_CASES = [c for c in CASES if c[0] not in FLOAT_OUTPUT_IN_INT8]


def _params(marks_for=lambda name: ()):
    return [pytest.param(name, id=name,
                         marks=[*(() if name in CI_CASES else (pytest.mark.slow,)),
                                *marks_for(name)])
            for name, _, _ in _CASES]


@functools.lru_cache(maxsize=None)
def _compiled(name: str):
    """(program, inputs) of case ``name`` compiled with int16 activations."""
    factory, shapes = {n: (f, s) for n, f, s in CASES}[name]
    torch.manual_seed(0)
    module = factory().eval()
    inputs = tuple(torch.randn(s) for s in shapes)
    prog = mcu_npu.compile(module, inputs, target=TARGET, calibration=calibration_set(inputs),
                           precision="int16")
    return prog, inputs


def assert_within_one_step(prog, inputs, steps: int = 1):
    """Host run against the quantized reference, counted in output steps. Both are integers
    times the step in float32, so they are compared as integers (an int16 value times its
    scale carries float32 rounding of a few thousandths of a step)."""
    expected = as_list(prog.reference(*inputs))
    got = prog.run(*inputs)
    assert len(got) == len(expected)
    for e, g, step in zip(expected, got, reference_output_steps(prog.reference)):
        assert g.shape == e.shape
        diff = (torch.round(g.double() / step) - torch.round(e.double() / step)).abs()
        assert float(diff.max()) <= steps, f"{float(diff.max())} steps of {step}"


@pytest.mark.parametrize("name", _params())
def test_int16_op_runs_on_npu(name):
    if name in NOT_ON_NPU_IN_INT8:
        pytest.skip("Vela runs this case on the CPU in int8 too")
    prog, _ = _compiled(name)
    placements = {o.node: o.placement for o in prog.report.ops}
    assert placements and all(p.startswith("NPU partition") for p in placements.values()), \
        prog.report


@pytest.mark.parametrize("name", _params())
def test_int16_op_precision(name):
    """int16 where the operator converts in int16; else int8 with the reason."""
    prog, _ = _compiled(name)
    kept = prog.report.precision["kept_int8"]
    on_npu = [o for o in prog.report.ops if o.placement.startswith("NPU partition")]
    assert on_npu or name in NOT_ON_NPU_IN_INT8, prog.report
    for o in on_npu:
        if name in STAYS_INT8 or o.op in PARTLY_INT8.get(name, ()):
            assert o.precision == "int8", prog.report
            assert "no int16 (16x8) conversion" in kept[o.ident], kept
        else:
            assert o.precision == "int16", prog.report
            assert o.ident not in kept
    for o in prog.report.ops:
        if not o.placement.startswith("NPU partition"):
            assert o.ident in kept, kept  # a CPU op asked for int16 says why it is not


@pytest.mark.parametrize("name", _params())
def test_int16_op_matches_reference(name):
    prog, inputs = _compiled(name)
    assert_within_one_step(prog, inputs, TABLE_STEPS if name in TABLE_OPS else 1)


def test_conv_transpose1d_int16():
    """conv_transpose1d (no case of its own): TRANSPOSE_CONV 16x8 of height 1, cropped."""
    torch.manual_seed(0)
    inputs = (torch.randn(2, 4, 9),)
    module = torch.nn.ConvTranspose1d(4, 5, 4, stride=2, padding=1).eval()
    prog = mcu_npu.compile(module, inputs, target=TARGET, calibration=calibration_set(inputs),
                           precision="int16")
    (op,) = prog.report.ops
    assert op.placement.startswith("NPU partition") and op.precision == "int16", prog.report
    assert_within_one_step(prog, inputs)


def test_max_pool_explicit_padding_int16():
    """ceil_mode padding is an explicit PADV2 with the lowest int16 value, not int8's."""
    torch.manual_seed(0)
    inputs = (torch.randn(1, 3, 8, 8),)
    module = torch.nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
    prog = mcu_npu.compile(module, inputs, target=TARGET, calibration=calibration_set(inputs),
                           precision="int16")
    (op,) = prog.report.ops
    assert op.placement.startswith("NPU partition") and op.precision == "int16", prog.report
    assert "PADV2" in prog.report.partitions[0].tflite_ops
    assert_within_one_step(prog, inputs)


class ConvHardswish(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)

    def forward(self, x):
        return torch.nn.functional.hardswish(self.conv(x))


def test_an_op_without_int16_conversion_stays_int8_inside_the_partition():
    """hardswish has no 16x8 conversion (Vela: "IFM has to be 8bit"): after an int16 conv
    it runs int8, behind a requantize, in the same NPU partition, and the report says why.
    Two ops, so the model contract: the host run's SQNR against the float model within 1 dB
    of the reference's (a requantize that rounds a tie the other way moves the int8 input
    by a step, which the op's slope can make more than one output step)."""
    torch.manual_seed(0)
    model = ConvHardswish().eval()
    inputs = (torch.randn(1, 3, 8, 8),)
    prog = mcu_npu.compile(model, inputs, target=TARGET,
                           calibration=calibration_set(inputs), precision="int16")
    precision = {o.op: o.precision for o in prog.report.ops}
    assert len(prog.report.partitions) == 1, prog.report
    assert all(o.placement == "NPU partition 0" for o in prog.report.ops), prog.report
    assert precision == {"aten.convolution": "int16", "aten.hardswish": "int8"}, prog.report
    (reason,) = prog.report.precision["kept_int8"].values()
    assert reason.startswith("no int16 (16x8) conversion for aten.hardswish")
    assert "QUANTIZE" in prog.report.partitions[0].tflite_ops
    with torch.no_grad():
        exact = model(*inputs)
    host, reference = prog.run(*inputs)[0], prog.reference(*inputs)
    assert sqnr_holds(sqnr_db(exact, host), sqnr_db(exact, reference))


class ConvThenLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def test_int16_override_by_module_name_requantizes_inside_one_partition():
    torch.manual_seed(0)
    inputs = (torch.randn(2, 3, 8, 8),)
    prog = mcu_npu.compile(ConvThenLinear().eval(), inputs, target=TARGET,
                           calibration=calibration_set(inputs),
                           precision={"default": "int8", "overrides": {"conv": "int16"}})
    precision = {o.op: o.precision for o in prog.report.ops}
    assert len(prog.report.partitions) == 1, prog.report
    assert all(o.placement == "NPU partition 0" for o in prog.report.ops), prog.report
    assert precision["aten.convolution"] == "int16" and precision["aten.linear"] == "int8"
    assert "QUANTIZE" in prog.report.partitions[0].tflite_ops
    assert prog.report.partitions[0].compiler == "vela"
    assert_within_one_step(prog, inputs)


def test_a_mean_over_the_int16_limit_stays_int8_on_the_npu():
    """Vela's int16 MEAN reduces at most 2**16 elements (int8: 2**24): a larger mean stays
    int8 on the NPU (requantized from the int16 conv before it) and the report says why,
    instead of leaving the NPU as a float kernel."""
    torch.manual_seed(0)
    inputs = (torch.randn(1, 1, 260, 260),)

    class ConvMean(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 1, 1)

        def forward(self, x):
            return self.conv(x).mean(dim=(2, 3))

    prog = mcu_npu.compile(ConvMean().eval(), inputs, target=TARGET,
                           calibration=calibration_set(inputs, n=2), precision="int16")
    ops = {o.op: o for o in prog.report.ops}
    conv, mean = ops["aten.convolution"], ops["aten.mean.dim"]
    assert conv.placement.startswith("NPU partition") and conv.precision == "int16"
    assert mean.placement.startswith("NPU partition") and mean.precision == "int8", \
        prog.report
    assert "no int16 (16x8) conversion for aten.mean here" in \
        prog.report.precision["kept_int8"][mean.ident]
    assert prog.report.summary["partitions"] == 1
    assert_within_one_step(prog, inputs)


def test_int16_softmax_over_a_long_axis():
    """A softmax over 512 values, where int8's 1/256 output step rounds most of them to 0:
    int16 keeps them, within the table ops' contract of the reference."""
    torch.manual_seed(0)
    x = (torch.randn(2, 512),)  # calibration_set draws the same distribution
    module = torch.nn.Softmax(dim=-1).eval()
    progs = {p: mcu_npu.compile(module, x, target=TARGET, calibration=calibration_set(x),
                                precision=p) for p in ("int8", "int16")}
    assert all(o.precision == "int16" and o.kernel == "npu"
               for o in progs["int16"].report.ops), progs["int16"].report
    assert_within_one_step(progs["int16"], x, TABLE_STEPS)
    exact = module(*x)
    gain = sqnr_db(exact, progs["int16"].run(*x)[0]) - sqnr_db(exact, progs["int8"].run(*x)[0])
    assert gain > 20, gain
