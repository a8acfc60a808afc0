"""Calibration methods: each fixed method gives the range it promises, ``auto`` moves off
MinMax only where that measurably lowers the quantization error, the error it measures is
the real one, the choice is deterministic, and a compile with each method keeps the
numerics contract and says in its report which method set each tensor."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchao.quantization.pt2e.observer import MinMaxObserver

import mcu_npu
from mcu_npu.errors import ConfigError
from mcu_npu.quantization import NpuQuantizer, quantize
from mcu_npu.quantization.calibration import METHODS
from mcu_npu.quantization.calibration.auto import MARGIN_DB
from mcu_npu.quantization.calibration.observer import CalibrationObserver
from mcu_npu.quantization.calibration.percentile import HIGH, LOW
from mcu_npu.quantization.exact import run_exact
from tests.helpers import run_cli, sqnr_db, sqnr_holds

INT8 = dict(dtype=torch.int8, quant_min=-128, quant_max=127, qscheme=torch.per_tensor_affine)
INT16 = dict(dtype=torch.int16, quant_min=-(2**15), quant_max=2**15 - 1,
             qscheme=torch.per_tensor_symmetric)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def outliers(batches=16, size=200_000):
    """Most values uniform in [-1, 1], one at 50: one in 3,200,000 values, rare enough that
    clipping it costs less than the coarser step keeping it costs every other value."""
    g = _gen(1)
    data = [torch.rand(size, generator=g, dtype=torch.float64) * 2 - 1 for _ in range(batches)]
    data[3][1234] = 50.0
    return data


def uniform(batches=8, size=100_000):
    g = _gen(2)
    return [torch.rand(size, generator=g, dtype=torch.float64) * 2 - 1 for _ in range(batches)]


def gaussian(batches=8, size=20_000):
    g = _gen(3)
    return [torch.randn(size, generator=g, dtype=torch.float64) for _ in range(batches)]


def observe(method, data, spec=INT8):
    """A calibrated observer, as calibration leaves it: fed in float64, then float32."""
    obs = CalibrationObserver(method=method, eps=2**-20, **spec).double()
    for x in data:
        obs(x)
    return obs.float()


def true_error(obs, data) -> float:
    """The mean squared error of quantizing ``data`` with the observer's parameters."""
    scale, zero_point = obs.calculate_qparams()
    x = torch.cat(data)
    q = torch.clamp(torch.round(x / scale.double()) + zero_point, obs.quant_min, obs.quant_max)
    return float(((q - zero_point) * scale.double() - x).pow(2).mean())


def minmax_qparams(data, spec):
    obs = MinMaxObserver(eps=2**-20, **spec).double()
    for x in data:
        obs(x)
    return obs.float().calculate_qparams()


@pytest.mark.parametrize("spec", [INT8, INT16], ids=["int8", "int16"])
def test_auto_keeps_minmax_on_uniform_data(spec):
    obs = observe("auto", uniform(), spec)
    assert obs.record["method"] == "minmax"
    scale, zero_point = obs.calculate_qparams()
    mm_scale, mm_zero_point = minmax_qparams(uniform(), spec)
    assert torch.equal(scale, mm_scale) and torch.equal(zero_point, mm_zero_point)


def test_auto_clips_a_rare_outlier_and_lowers_the_error():
    data = outliers()
    obs = observe("auto", data)
    record = obs.record
    assert record["method"] != "minmax" and record["range"][1] < 50.0
    mm = observe("minmax", data)
    assert mm.record["method"] == "minmax" and mm.record["range"][1] == 50.0
    # the pick's real error (the data quantized with its parameters) is lower by the margin
    assert true_error(obs, data) < true_error(mm, data) * 10 ** (-MARGIN_DB / 10)
    assert record["mse"] < record["minmax_mse"] * 10 ** (-MARGIN_DB / 10)


def test_auto_int16_keeps_a_rare_outlier_whose_clipping_costs_more_than_rounding():
    """int16 steps are 256 times finer: clipping the 50 would cost far more than the
    rounding it saves, so the symmetric range keeps it."""
    data = outliers()
    obs = observe("auto", data, INT16)
    assert obs.record["method"] == "minmax"
    scale, zero_point = obs.calculate_qparams()
    assert int(zero_point) == 0 and float(scale) == pytest.approx(50.0 / 32767.5, rel=1e-6)


@pytest.mark.parametrize("method", ["minmax", "histogram", "percentile", "mse", "auto"])
@pytest.mark.parametrize("spec", [INT8, INT16], ids=["int8", "int16"])
def test_measured_error_is_the_real_quantization_error(method, spec):
    """The histogram-based figure the choice rests on is within 10% of the error of
    quantizing the calibration data itself, for the chosen range and for MinMax's."""
    for data in (gaussian(), outliers(size=20_000)):
        obs = observe(method, data, spec)
        assert obs.record["mse"] == pytest.approx(true_error(obs, data), rel=0.1)
        mm = observe("minmax", data, spec)
        assert obs.record["minmax_mse"] == pytest.approx(true_error(mm, data), rel=0.1)


def test_minmax_is_the_exact_min_and_max():
    data = gaussian()
    obs = observe("minmax", data)
    x = torch.cat(data)
    assert obs.record["range"] == [float(x.min()), float(x.max())]
    scale, zero_point = obs.calculate_qparams()
    mm_scale, mm_zero_point = minmax_qparams(data, INT8)
    assert torch.equal(scale, mm_scale) and torch.equal(zero_point, mm_zero_point)


def test_percentile_is_the_percentile_of_the_data():
    """Evenly spaced values on [0, 4]: the LOW-th and HIGH-th percentiles are known, to
    within one histogram bin."""
    x = torch.linspace(0.0, 4.0, 1_000_001, dtype=torch.float64)
    obs = observe("percentile", list(x.chunk(8)))
    lo, hi = obs.record["range"]
    width = obs.binned.width
    assert lo == pytest.approx(4.0 * LOW / 100, abs=width)
    assert hi == pytest.approx(4.0 * HIGH / 100, abs=width)
    assert hi < 4.0


def test_histogram_search_clips_a_gaussian_tail_and_not_a_uniform_edge():
    data = gaussian()
    obs = observe("histogram", data)
    x = torch.cat(data)
    assert float(x.min()) <= obs.record["range"][0] and obs.record["range"][1] < float(x.max())
    assert obs.record["mse"] < obs.record["minmax_mse"]
    flat = observe("histogram", uniform())
    lo, hi = flat.record["range"]
    assert lo == pytest.approx(-1.0, abs=0.01) and hi == pytest.approx(1.0, abs=0.01)


def test_mse_range_is_as_good_as_a_brute_force_scan():
    """No range of a fine scan of [-c, c] quantizes the data with a real error more than 2%
    lower than the MSE method's."""
    data = gaussian()
    obs = observe("mse", data)
    x = torch.cat(data)
    best = min(_scan_error(x, c) for c in np.linspace(2.0, float(x.abs().max()), 200))
    assert true_error(obs, data) <= best * 1.02
    assert obs.record["mse"] < obs.record["minmax_mse"]


def _scan_error(x, c) -> float:
    scale = torch.tensor(2 * c / 255, dtype=torch.float32).double()
    q = torch.clamp(torch.round(x / scale), -128, 127)
    return float((q * scale - x).pow(2).mean())


@pytest.mark.parametrize("method", METHODS)
def test_the_choice_is_deterministic(method):
    """The same data gives bit-identical parameters, and float32 data seen as float64 the
    same as the float64 calibration gives."""
    data = [x.float() for x in gaussian()]
    a, b = observe(method, data), observe(method, [x.double() for x in data])
    for one, other in zip(a.calculate_qparams(), b.calculate_qparams()):
        assert torch.equal(one, other)
    assert a.record == b.record


def _conv_model():
    with torch.random.fork_rng():  # the other tests' random state stays as it was
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.Hardtanh(-2, 2),
            torch.nn.Conv2d(8, 4, 1), torch.nn.Flatten(), torch.nn.Linear(4 * 8 * 8, 10)).eval()


def _samples(n, seed):
    g = _gen(seed)
    return [(torch.randn(1, 3, 8, 8, generator=g),) for _ in range(n)]


def test_quantize_twice_gives_the_same_parameters():
    model, samples = _conv_model(), _samples(8, 4)
    refs = [quantize(torch.export.export(model, samples[0]).module(), samples[0], samples,
                     NpuQuantizer()) for _ in range(2)]
    params = [[(str(n.target), [float(a) for a in n.args[1:3]]) for n in r.graph.nodes
               if "quantize_per_tensor" in str(n.target)] for r in refs]
    assert params[0] == params[1] and params[0]


def test_bad_method_names_are_config_errors():
    model, samples = _conv_model(), _samples(2, 5)
    with pytest.raises(ConfigError, match="choose one of: auto, minmax, histogram"):
        mcu_npu.compile(model, samples[0], target="corstone-300", calibration=samples,
                        calibration_method="kl")
    with pytest.raises(ConfigError, match="quantization-aware training"):
        mcu_npu.compile(model, samples[0], target="corstone-300", calibration=samples,
                        calibration_method="mse", train_fn=lambda gm: None)
    with pytest.raises(ConfigError, match="unknown calibration_method"):
        NpuQuantizer(calibration_method="MinMax")


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_compile_with_each_method_keeps_the_numerics_contract(method):
    """corstone-300 (Vela), the linear layer on the Cortex-M kernels: each method's program
    agrees with its quantized reference over all outputs of 8 inputs, and the report says
    which method set each activation, in its text, summary and JSON."""
    model, samples = _conv_model(), _samples(16, 6)
    prog = mcu_npu.compile(model, samples[0], target="corstone-300", calibration=samples,
                           operators_not_to_delegate=["aten.linear"],
                           calibration_method=method, progress=False)
    inputs = _samples(8, 7)
    with torch.no_grad():
        expected = torch.cat([model(*x).flatten() for x in inputs])
    host = torch.cat([prog.run(*x)[0].flatten() for x in inputs])
    reference = torch.cat([run_exact(prog.reference, *x).flatten() for x in inputs])
    assert sqnr_holds(sqnr_db(expected, host), sqnr_db(expected, reference))

    report = prog.report
    section = report.calibration
    assert section["method"] == method and report.summary["calibration"]["method"] == method
    chosen = {t["method"] for t in section["tensors"]}
    assert chosen - {"fixed"} <= ({"minmax", "histogram", "percentile", "mse"}
                                  if method == "auto" else {method})
    assert sum(section["counts"].values()) == len(section["tensors"]) > 4
    by_op = {o.op: o.calibration for o in report.ops if o.calibration}
    assert by_op.get("aten.linear") in chosen  # the Cortex-M side too
    assert by_op.get("aten.relu") in chosen
    measured = [t for t in section["tensors"] if "gain_db" in t]
    assert bool(measured) == (method != "minmax")  # MinMaxObserver itself measures nothing
    if method == "auto":  # each pick off MinMax lowers the measured error by the margin
        assert all(t["gain_db"] >= MARGIN_DB if t["method"] != "minmax" else
                   t["gain_db"] == 0 for t in measured)
    assert f"calibration {method}:" in str(report)
    assert "<h2>Calibration</h2>" in report.to_html()
    again = type(report).from_json(report.to_json())
    assert again.calibration == section and [o.calibration for o in again.ops] == \
        [o.calibration for o in report.ops]


@pytest.mark.slow
def test_int16_compile_with_auto_keeps_the_numerics_contract():
    model, samples = _conv_model(), _samples(16, 8)
    prog = mcu_npu.compile(model, samples[0], target="corstone-300", calibration=samples,
                           precision="int16", progress=False)
    inputs = _samples(8, 9)
    with torch.no_grad():
        expected = torch.cat([model(*x).flatten() for x in inputs])
    host = torch.cat([prog.run(*x)[0].flatten() for x in inputs])
    reference = torch.cat([run_exact(prog.reference, *x).flatten() for x in inputs])
    assert sqnr_holds(sqnr_db(expected, host), sqnr_db(expected, reference))
    bits = {t["bits"] for t in prog.report.calibration["tensors"]}
    assert 16 in bits


@pytest.mark.slow
def test_cli_calibration_method_flag(tmp_path):
    torch.export.save(torch.export.export(_conv_model(), _samples(1, 10)[0]), tmp_path / "m.pt2")
    np.savez(tmp_path / "cal.npz", torch.cat([s[0] for s in _samples(8, 11)])[:, None].numpy())
    done = run_cli("compile", tmp_path / "m.pt2", "--target", "corstone-300", "--calibration",
                   tmp_path / "cal.npz", "--calibration-method", "percentile", "-q",
                   "-o", tmp_path / "m.pte")
    assert done.returncode == 0, done.stderr
    assert "calibration percentile:" in done.stdout
    bad = run_cli("compile", tmp_path / "m.pt2", "--target", "corstone-300",
                  "--calibration-method", "kl", "-q", "-o", tmp_path / "bad.pte")
    lines = [line for line in bad.stderr.splitlines() if line.strip()]
    assert bad.returncode != 0 and len(lines) == 1 and "choose one of: auto" in lines[0]
    assert not (tmp_path / "bad.pte").exists()
