"""Delegate I/O is what the device runtimes hand the NPU, and the host copies it the same way.

Ethos-U (EthosUBackend.cpp) memcpys each delegate tensor in its memory order into the NPU
region Vela describes; Neutron (NeutronBackend.cpp) transposes only where the payload's format
flag is set and the channel dim is not 1. For every program here the tests read the payload's
own I/O records (Vela's 6-D shapes, Neutron's flags) beside the .pte's tensors and check they
agree, then run the program on the host, whose emulators copy exactly as the devices do.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from device_checks import (assert_ethos_u_io_matches, assert_neutron_io_matches, delegate_io,
                           merges_of)
from helpers import assert_loads_in_executorch, calibration_set, sqnr_db
from zoo.neutron_sdk_double import Behaviour, install

import mcu_npu
from mcu_npu.quantization.exact import run_exact
from mcu_npu.device.delegate_io import neutron_layout
from mcu_npu.npu.neutron import payload as nxp
from mcu_npu.device.payload import find_host_graph, unpack_reference

ETHOS_U = ("ethos-u55-128", "ethos-u85-256", "corstone-300")


class ConvNet(torch.nn.Module):
    """Image in, conv features out: both boundaries are 4-D with several channels."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Conv2d(4, 8, 3), torch.nn.Conv2d(8, 6, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class TwoInputs(torch.nn.Module):
    """A five-channel and a one-channel image."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Conv2d(5, 4, 3, padding=1), torch.nn.Conv2d(1, 4, 3, padding=1)

    def forward(self, x, y):
        return torch.relu(self.a(x) + self.b(y))


class Conv1dNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Conv1d(6, 8, 3), torch.nn.Conv1d(8, 5, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _cases():
    torch.manual_seed(0)
    image = (torch.randn(1, 4, 18, 14),)
    return {
        "conv": (ConvNet(), image),
        "two_inputs": (TwoInputs(), (torch.randn(1, 5, 10, 12), torch.randn(1, 1, 10, 12))),
        "conv1d": (Conv1dNet(), (torch.randn(1, 6, 20),)),
        "channels_last": (ConvNet(), (image[0].to(memory_format=torch.channels_last),)),
    }


CASES = _cases()


def _channels_last_like(samples, example):
    return [tuple(s.to(memory_format=torch.channels_last) if e.dim() == 4 and
                  e.is_contiguous(memory_format=torch.channels_last) and not e.is_contiguous()
                  else s for s, e in zip(sample, example)) for sample in samples]


def _compile(case, target, **kw):
    model, inputs = CASES[case]
    calibration = _channels_last_like(calibration_set(inputs), inputs)
    return mcu_npu.compile(model.eval(), inputs, target=target, calibration=calibration, **kw)


def assert_holds_the_numerics_contract(prog, case) -> None:
    """The host run's SQNR against the float model is within 1 dB of the quantized
    reference's (the whole-model contract), on samples the calibration did not see."""
    model, inputs = CASES[case]
    samples = _channels_last_like(calibration_set(inputs, n=4, seed=7), inputs)
    with torch.no_grad():
        floats = torch.cat([model(*s).flatten() for s in samples])
        host = torch.cat([prog.run(*s)[0].flatten() for s in samples])
        reference = torch.cat([run_exact(prog.reference, *s).flatten() for s in samples])
    got, expected = sqnr_db(floats, host), sqnr_db(floats, reference)
    assert got >= expected - 1.0, f"{case}: host run {got:.2f} dB, reference {expected:.2f} dB"


@pytest.mark.parametrize("target", ETHOS_U)
@pytest.mark.parametrize("case", list(CASES))
def test_ethos_u_delegate_io_is_the_device_layout(case, target):
    prog = _compile(case, target)
    assert_ethos_u_io_matches(prog.buffer)
    assert_holds_the_numerics_contract(prog, case)
    inputs = CASES[case][1]
    assert_loads_in_executorch(prog.buffer, inputs, prog.run(*inputs))


def test_channels_last_input_needs_no_transpose_anywhere():
    prog = _compile("channels_last", "ethos-u55-128")
    (processed, inputs, outputs, named), = delegate_io(prog.buffer, prog.host_data)
    assert inputs[0][1] == (0, 2, 3, 1) and outputs[0][1] == (0, 2, 3, 1)
    model, _ = unpack_reference(find_host_graph(named, processed))
    assert "TRANSPOSE" not in prog.report.partitions[0].tflite_ops
    contiguous = _compile("conv", "ethos-u55-128")
    assert contiguous.report.partitions[0].tflite_ops.count("TRANSPOSE") == 2
    assert prog.report.summary["npu_cycles"] < contiguous.report.summary["npu_cycles"]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("compiler", ["reference", "neutron"])
def test_neutron_flags_are_what_the_runtime_reads(case, compiler, monkeypatch):
    if compiler == "neutron":
        install(monkeypatch, Behaviour())
    prog = _compile(case, "imxrt700", npu_compiler=compiler)
    assert_neutron_io_matches(prog.buffer, prog.host_data)
    assert_holds_the_numerics_contract(prog, case)


def test_neutron_flags_per_case(monkeypatch):
    """4-D several channels: flag set (CPU transposes); one channel or conv1d: no flag."""
    install(monkeypatch, Behaviour())
    flags = {}
    for case in CASES:
        prog = _compile(case, "imxrt700", npu_compiler="neutron")
        (processed, *_), = delegate_io(prog.buffer)
        fields = nxp.parse(processed)
        flags[case] = (fields.input_formats, fields.output_formats)
    assert flags["conv"] == ((1,), (1,))
    assert flags["channels_last"] == ((1,), (1,))  # channels-last tensors: used as they are
    assert sorted(flags["two_inputs"][0]) == [0, 1]  # C = 5 flagged, C = 1 plain
    assert flags["conv1d"] == ((0,), (0,))  # 3-D (1, C, L): sizes[0] == 1, the graph transposes


def test_dropping_the_boundary_transpose_is_caught_on_the_host(monkeypatch):
    """A converter that ignores the runtime's copy (as if the CPU transposed) gives programs
    whose I/O records disagree with the .pte, and whose host run is wrong."""
    import mcu_npu.tflite.converter as converter

    monkeypatch.setattr(converter, "_boundary_layout",
                        lambda ctx, node, shape, preferred, **_: preferred)
    prog = _compile("conv", "ethos-u55-128")
    with pytest.raises(AssertionError, match="copied as it lies"):
        assert_ethos_u_io_matches(prog.buffer)
    with pytest.raises(AssertionError):
        assert_holds_the_numerics_contract(prog, "conv")
    assert prog.report.accuracy["sqnr_db"] < prog.report.accuracy["reference_sqnr_db"] - 10


def test_ethos_u_emulator_refuses_what_the_runtime_refuses():
    """Float data, or a different element count, reaching an Ethos-U delegate."""
    from mcu_npu.errors import InvalidProgramError
    from mcu_npu.runtime.delegates import DeviceTensor
    from mcu_npu.runtime.npu_emulator import run_ethos_u

    prog = _compile("conv", "ethos-u55-128")
    (processed, inputs, outputs, named), = delegate_io(prog.buffer, prog.host_data)
    out = DeviceTensor(torch.zeros(outputs[0][0], dtype=torch.int8), (0, 1, 2, 3))
    as_float = DeviceTensor(torch.zeros(inputs[0][0]), (0, 1, 2, 3))
    with pytest.raises(InvalidProgramError, match="runtime copies only int32"):
        run_ethos_u(processed, [], named, [as_float], [out])
    short = DeviceTensor(torch.zeros(1, 4, 18, 13, dtype=torch.int8), (0, 1, 2, 3))
    with pytest.raises(InvalidProgramError, match="Input tensor sizes do not match"):
        run_ethos_u(processed, [], named, [short], [out])
    good = DeviceTensor(torch.zeros(inputs[0][0], dtype=torch.int8), (0, 1, 2, 3))
    with pytest.raises(InvalidProgramError, match="expects 1 inputs and 1 outputs"):
        run_ethos_u(processed, [], named, [good, good], [out])


def test_merges_of():
    assert merges_of([4, 18, 14], [4, 252]) and merges_of([4, 18, 14], [4, 18, 14])
    assert merges_of([4, 18, 14], [1008]) and merges_of([4, 18, 14], [72, 14])
    assert not merges_of([4, 18, 14], [252, 4]) and not merges_of([4, 18, 14], [18, 14, 4])
    assert not merges_of([4, 18, 14], [4, 18]) and not merges_of([6, 4], [4, 6])


@pytest.mark.parametrize("sizes, dim_order, flag, expected", [
    ((1, 3, 4, 5), (0, 1, 2, 3), 1, (0, 2, 3, 1)),  # contiguous: transposed to NHWC
    ((1, 3, 4, 5), (0, 2, 3, 1), 1, (0, 2, 3, 1)),  # channels last: used as it is
    ((1, 1, 4, 5), (0, 1, 2, 3), 1, (0, 1, 2, 3)),  # one channel: no transpose
    ((2, 3, 4), (0, 1, 2), 1, (1, 2, 0)),  # 3-D: sizes[0] is the channel dim
    ((1, 3, 4), (0, 1, 2), 1, (0, 1, 2)),  # conv1d (1, C, L): sizes[0] == 1, no transpose
    ((2, 2, 3, 4, 5), (0, 1, 2, 3, 4), 1, (0, 1, 3, 4, 2)),  # 5-D: leading dims kept
    ((1, 3, 4, 5), (0, 1, 2, 3), 0, (0, 1, 2, 3)),
])
def test_neutron_layout_rules(sizes, dim_order, flag, expected):
    assert neutron_layout(sizes, dim_order, flag) == expected


@pytest.mark.parametrize("sizes, dim_order, flag, match", [
    ((4, 16), (0, 1), 1, "cannot transpose a 2-D"),
    ((1, 3, 4, 5), (0, 2, 3, 1), 0, "expects a contiguous dim order"),
    ((1, 3, 4, 5), (0, 3, 1, 2), 1, "refuses dim order"),
    ((1, 1, 4, 5), (0, 2, 3, 1), 1, "expects a contiguous dim order"),
])
def test_neutron_layout_refusals(sizes, dim_order, flag, match):
    from mcu_npu.errors import InvalidProgramError

    with pytest.raises(InvalidProgramError, match=match):
        neutron_layout(sizes, dim_order, flag)


def test_neutron_transpose_moves_bytes_like_the_runtime():
    """``to_npu`` under the contiguous -> flagged layout writes what transposeToChannelLast
    writes: dest[n*H*W*C + h*W*C + w*C + c] = src[n*C*H*W + c*H*W + h*W + w]."""
    from mcu_npu.device.delegate_io import to_npu

    n, c, h, w = 2, 3, 4, 5
    src = np.arange(n * c * h * w, dtype=np.int8)
    got = to_npu(src, (n, c, h, w), (0, 1, 2, 3), neutron_layout((n, c, h, w), (0, 1, 2, 3), 1))
    expected = np.empty_like(src)
    for i in range(n):
        for j in range(c):
            for k in range(h):
                for m in range(w):
                    expected[i * h * w * c + k * w * c + m * c + j] = \
                        src[i * c * h * w + j * h * w + k * w + m]
    np.testing.assert_array_equal(got, expected)


def test_partitions_with_one_payload_keep_their_host_graphs():
    """Two partitions that Vela compiles to the same command stream, from graphs that differ
    in tensor names only: each graph is kept under its own key (ExecuTorch refuses one key
    with two contents), and the program runs both."""
    import torch.nn.functional as F

    class Twice(torch.nn.Module):
        def forward(self, x):
            y = torch.clamp(F.max_pool2d(x, 3, 1, 1), -10.0, 10.0)  # the clamp keeps the scale
            return F.max_pool2d(y, 3, 1, 1)

    x = torch.randn(1, 4, 6, 6, generator=torch.Generator().manual_seed(0))
    prog = mcu_npu.compile(Twice(), (x,), "corstone-300", calibration=[(x,)],
                           operators_not_to_delegate=["aten.clamp"])
    keys = [k for k in prog.host_data if k.startswith("mcu_npu.host_graph.")]
    assert len(keys) == 2 and keys[0].split(".")[2] == keys[1].split(".")[2]  # one payload
    want = prog.reference(x)
    assert torch.equal(prog.run(x)[0], want)  # max pooling is exact in int8
