"""Means in the forms Vela encodes without a window of weights (``NpuSpec.compact_means``,
the Ethos-U's): a spatial mean that keeps its input's quantization is an AVERAGE_POOL_2D;
another mean over the leading axes is the MEAN over the height of a ``[1, reduced, channels,
1]`` view.

Vela turns a MEAN into a depthwise convolution whose all-ones weights have kernel x depth
bytes; in the column view the depth is 1, a pool has none. The checks: the converted graph
has the expected form, LiteRT gives the plain MEAN's integers (the column view: the same
arithmetic) or stays within one output step of the quantized reference (the pool), Vela places
it on the NPU of the U55 and the U85, and the weights it encodes into the payload the device
reads shrink. Past Vela's four convolutions of 64 rows (256 reduced elements) the plain MEAN
stays, as it does without the target.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers import output_step, quantized_edge, run_tflite

from mcu_npu.npu.ethos_u.payload import blocks
from mcu_npu.npu.ethos_u.vela import VelaCompiler
from mcu_npu.npu.ethos_u.vela_support import vela_rejections
from mcu_npu.targets import get_target
from mcu_npu.tflite.converter import convert
from mcu_npu.tflite.describe import describe
from mcu_npu.tflite.ops.reduce import _as_column, _pool_window

pytest.importorskip("ethosu.vela")
U55, U85 = get_target("ethos-u55-128"), get_target("ethos-u85-256")


class ConvMean(nn.Module):
    """A conv (so the mean reads a channels-last NPU tensor), ReLU, then a mean."""

    def __init__(self, dims, keepdim=False, channels=16):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.dims, self.keepdim = dims, keepdim

    def forward(self, x):
        y = torch.relu(self.conv(x))
        if self.dims == "adaptive":  # exported as a mean that shares its input's parameters
            return torch.flatten(F.adaptive_avg_pool2d(y, 1), 1)
        return y.mean(self.dims, keepdim=self.keepdim)


# (id, mean dims, keepdim, input H x W, reduced elements, channels of the view, conv channels)
CASES = [
    ("global_8x8", (2, 3), False, (8, 8), 64, 32, 32),
    ("global_keepdim_10x15", (2, 3), True, (10, 15), 150, 32, 32),
    ("global_16x16", (-1, -2), False, (16, 16), 256, 32, 32),
    ("height_only", (2,), True, (20, 4), 20, 64, 16),
]
POOLS = [("adaptive_8x8", "adaptive", False, (8, 8), 64, 16, 16),
         ("adaptive_25x5", "adaptive", False, (25, 5), 125, 16, 16)]


def _convert(name):
    _, dims, keepdim, hw, _, _, channels = next(c for c in CASES + POOLS if c[0] == name)
    torch.manual_seed(0)
    model = ConvMean(dims, keepdim, channels).eval()
    g = torch.Generator().manual_seed(1)
    calibration = [(torch.randn(1, 3, *hw, generator=g),) for _ in range(8)]
    reference, edge = quantized_edge(model, calibration[0], calibration)
    program = edge.exported_program()
    return calibration, reference, edge, convert(program), convert(program, U85)


@pytest.fixture(scope="module")
def converted():
    return {c[0]: _convert(c[0]) for c in CASES + POOLS}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_mean_reduces_the_height_of_a_column_view(converted, case):
    name, _, _, _, reduced, channels, _ = case
    means = [ln for ln in describe(converted[name][4].buffer).splitlines()
             if ln.startswith("MEAN(")]
    assert len(means) == 1 and means[0].startswith(f"MEAN(int8[1, {reduced}, {channels}, 1] ")
    assert f"-> int8[1, 1, {channels}, 1]" in means[0]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_column_mean_gives_the_plain_means_integers(converted, case):
    samples, reference, edge, plain, column = converted[case[0]]
    (step,) = output_step(edge)
    for x in samples:
        (want,), (got,) = run_tflite(plain, x), run_tflite(column, x)
        np.testing.assert_array_equal(got, want)
        diff = np.abs(got - reference(*x).detach().numpy()).max() / step
        assert diff <= 1.0 + 1e-3, f"{diff:.2f} output steps off the quantized reference"


@pytest.mark.parametrize("case", POOLS, ids=[c[0] for c in POOLS])
def test_mean_keeping_its_parameters_is_an_average_pool(converted, case):
    samples, reference, edge, plain, pool = converted[case[0]]
    lines = describe(pool.buffer).splitlines()
    assert not [ln for ln in lines if ln.startswith("MEAN(")]
    (line,) = [ln for ln in lines if ln.startswith("AVERAGE_POOL_2D(")]
    h, w = case[3]
    assert line.startswith(f"AVERAGE_POOL_2D(int8[1, {h}, {w}, 16] ")
    assert "-> int8[1, 1, 1, 16]" in line
    (step,) = output_step(edge)
    for x in samples:
        (got,) = run_tflite(pool, x)
        diff = np.abs(got - reference(*x).detach().numpy()).max() / step
        assert diff <= 1.0 + 1e-3, f"{diff:.2f} output steps off the quantized reference"


@pytest.mark.parametrize("target", [U55, U85], ids=lambda t: t.name)
@pytest.mark.parametrize("name", ["global_keepdim_10x15", "global_16x16", "adaptive_25x5"])
def test_vela_runs_the_column_mean_with_fewer_weight_bytes(converted, name, target):
    _, _, _, plain, column = converted[name]
    assert vela_rejections(column, target) == {}

    def weight_bytes(model):
        payload = VelaCompiler().compile(model, target).payload
        return sum(len(data) for block, _, data in blocks(payload) if block == "weight_data")

    assert weight_bytes(column) < weight_bytes(plain)


def test_column_view_bounds():
    """Contiguous leading axes only, at most 4 x 64 reduced rows, and at least 1 KiB of
    weights saved per convolution Vela makes of the column."""
    assert _as_column([1, 16, 16, 32], [1, 2]) == (1, 256, 32, 1)
    assert _as_column([16, 16, 32], [0, 1]) == (1, 256, 32, 1)
    assert _as_column([1, 64, 17], [1]) == (1, 64, 17, 1)  # 64 x 16 = 1,024 saved, 1 conv
    assert _as_column([1, 64, 16], [1]) is None  # 960 saved
    assert _as_column([1, 65, 17], [1]) is None  # 1,040 saved, 2 convs
    assert _as_column([1, 16, 16, 16], [1, 2]) is None  # 3,840 saved, 4 convs
    assert _as_column([1, 257, 1, 64], [1, 2]) is None  # Vela would make five convolutions
    assert _as_column([1, 4, 4, 8], [2]) is None  # rows before the reduced axis
    assert _as_column([1, 4, 4, 8], [1, 3]) is None  # not contiguous
    assert _as_column([1, 2, 65536], [1]) is None  # a width Vela does not take


def test_pool_window_bounds():
    """Height and / or width of a batch of one, within Vela's VALID average pooling."""
    assert _pool_window([1, 25, 5, 64], [1, 2]) == (25, 5)
    assert _pool_window([1, 9, 4, 8], [1]) == (9, 1)
    assert _pool_window([1, 256, 256, 8], [1, 2]) == (256, 256)
    assert _pool_window([1, 257, 1, 8], [1, 2]) is None  # taller than 256
    assert _pool_window([1, 8, 8192, 8], [1, 2]) == (8, 8192)
    assert _pool_window([1, 8, 8193, 8], [1, 2]) is None  # more than 65,536 elements
    assert _pool_window([2, 8, 8, 8], [1, 2]) is None  # a batch of two
    assert _pool_window([1, 8, 8, 8], [3]) is None  # channels


def test_past_four_convolutions_the_plain_mean_stays():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    calibration = [(torch.randn(1, 3, 17, 16, generator=g),) for _ in range(2)]
    _, edge = quantized_edge(ConvMean((2, 3), channels=32).eval(), calibration[0], calibration)
    text = describe(convert(edge.exported_program(), U85).buffer)
    assert "MEAN(int8[1, 17, 16, 32] " in text


class TwoMeans(nn.Module):
    """Both forms in one network: a mean with its own parameters (a column) and a global
    average pool (an AVERAGE_POOL_2D), concatenated into a classifier."""

    def __init__(self):
        super().__init__()
        self.stem, self.conv = nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 32, 3, padding=1)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        y = torch.relu(self.stem(x))
        pooled = torch.flatten(F.adaptive_avg_pool2d(torch.relu(self.conv(y)), 1), 1)
        return self.fc(torch.cat([y.mean((2, 3)), pooled], 1))


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
def test_network_with_compact_means_keeps_the_numerics_contract(target):
    """Everything on the NPU in one partition; the host run's SQNR against float within 1 dB
    of the quantized reference's over 8 held-out inputs."""
    import mcu_npu
    from helpers import sqnr_db, sqnr_holds
    from mcu_npu.quantization.exact import run_exact

    torch.manual_seed(0)
    model = TwoMeans().eval()
    g = torch.Generator().manual_seed(2)
    calibration = [(torch.randn(1, 3, 12, 10, generator=g),) for _ in range(8)]
    tests = [(torch.randn(1, 3, 12, 10, generator=g),) for _ in range(8)]
    prog = mcu_npu.compile(model, calibration[0], target=target, calibration=calibration)
    s = prog.report.summary
    assert s["ops_on_cpu"] == 0 and s["partitions"] == 1, prog.report
    with torch.no_grad():
        floats = torch.cat([model(*t).flatten() for t in tests])
        refs = torch.cat([run_exact(prog.reference, *t).flatten() for t in tests])
    runs = torch.cat([prog.run(*t)[0].flatten() for t in tests])
    assert sqnr_holds(sqnr_db(floats, runs), sqnr_db(floats, refs))
