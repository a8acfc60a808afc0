"""``compile(..., bias_correction=True)`` (``quantization.calibration.bias_correction``): each
layer's bias takes the shift its rounded weights and inputs gave its per-channel output
mean, kept only where the whole model's output SQNR on the calibration samples rises; the
report gives the verdict; refused with quantization-aware training."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import mcu_npu
from mcu_npu.errors import ConfigError
from mcu_npu.quantization.calibration import bias_correction, whole_model
from mcu_npu.quantization.exact import run_exact
from mcu_npu.estimate.metrics import flat_outputs, sqnr_db


class Separable(nn.Module):
    """Depthwise-separable blocks (3x3 depthwise, 1x1 pointwise, BatchNorm, ReLU) and a
    linear head: the layers whose few products let rounded weights move a channel's mean."""

    def __init__(self):
        super().__init__()
        layers, c = [nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU()], 16
        for out in (24, 32):
            layers += [nn.Conv2d(c, c, 3, padding=1, groups=c), nn.BatchNorm2d(c), nn.ReLU(),
                       nn.Conv2d(c, out, 1), nn.BatchNorm2d(out), nn.ReLU()]
            c = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


@pytest.fixture(scope="module")
def separable():
    """The model with its BatchNorm statistics set from data (in float64, as on every
    host), 16 calibration and 32 held-out inputs."""
    torch.manual_seed(0)
    model = Separable()
    g = torch.Generator().manual_seed(1)
    calibration = [(torch.randn(1, 3, 16, 16, generator=g),) for _ in range(16)]
    tests = [torch.randn(1, 3, 16, 16, generator=g) for _ in range(32)]
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
    model.double().train()
    with torch.no_grad():
        model(torch.cat([c[0] for c in calibration]).double())
    return model.float().eval(), calibration, tests


def _compile(model, calibration, **kwargs):
    return mcu_npu.compile(model, calibration[0], target="imxrt700", calibration=calibration,
                           npu_compiler="reference", **kwargs)


def _reference_sqnr(model, prog, tests) -> float:
    with torch.no_grad():
        floats = torch.cat([t for x in tests for t in flat_outputs(model(x))])
        refs = torch.cat([t for x in tests for t in flat_outputs(run_exact(prog.reference, x))])
    return sqnr_db(floats, refs)


def test_corrected_biases_raise_the_accuracy_on_held_out_inputs(separable):
    model, calibration, tests = separable
    plain = _compile(model, calibration)
    corrected = _compile(model, calibration, bias_correction=True)
    verdict = corrected.report.calibration["bias_correction"]
    assert verdict["kept"] and verdict["layers"] == 6 and verdict["samples"] == 16
    assert verdict["after_db"] >= verdict["before_db"] + whole_model.MIN_GAIN_DB
    assert "bias_correction" not in plain.report.calibration
    # the converted references in float64 over 320 held-out outputs: 30.50 -> 31.16 dB
    assert _reference_sqnr(model, corrected, tests) > _reference_sqnr(model, plain, tests) + 0.5
    # the host runs the corrected program as the reference computes it
    assert abs(corrected.report.accuracy["sqnr_db"]
               - corrected.report.accuracy["reference_sqnr_db"]) <= 1.0
    text = str(corrected.report)
    assert f"biases corrected in 6 layer(s): output SQNR on 16 calibration sample(s) " \
           f"{verdict['after_db']:.2f} dB corrected, {verdict['before_db']:.2f} dB not" in text
    assert corrected.report.summary["calibration"]["bias_correction"] is True


def test_a_correction_turned_down_leaves_the_calibrated_biases(separable, monkeypatch):
    """Where the whole model gains too little, every bias goes back: the program is the one
    compiled without correction, byte for byte."""
    model, calibration, _ = separable
    plain = _compile(model, calibration)
    monkeypatch.setattr(bias_correction, "MIN_GAIN_DB", 1e9)
    declined = _compile(model, calibration, bias_correction=True)
    verdict = declined.report.calibration["bias_correction"]
    assert verdict["kept"] is False and verdict["after_db"] > verdict["before_db"]
    assert bytes(declined.buffer) == bytes(plain.buffer)
    assert "bias correction turned down (6 layer(s))" in str(declined.report)


def test_layers_are_found_behind_their_observers(separable):
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from mcu_npu.quantization.npu_quantizer import NpuQuantizer

    model, calibration, _ = separable
    gm = torch.export.export(model, calibration[0]).module(check_guards=False)
    prepared = prepare_pt2e(gm, NpuQuantizer())
    found = bias_correction.correctable(prepared)
    assert [n.target for n, _, _ in found] == [torch.ops.aten.conv2d.default] * 5 + [
        torch.ops.aten.linear.default]
    assert all(name.endswith("bias") for _, name, _ in found)


def test_verdict_is_the_simulated_sqnr_before_and_after(separable):
    """The correction reads "before" from auto's check and "after" off its own correcting run;
    both are the whole-model simulation of the ranges and biases the graph then holds."""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from mcu_npu.quantization import driver as nq

    model, calibration, _ = separable
    gm = torch.export.export(model, calibration[0]).module(check_guards=False)
    with nq.torchao_as_quantize_runs_it():
        prepared = prepare_pt2e(gm, nq.NpuQuantizer())
        outputs = nq.calibrate(prepared, calibration)
        checked = nq.check_auto(prepared, calibration, outputs)
        assert checked is not None  # auto moved tensors here: "before" is the check's

        def simulated() -> float:
            with nq._computing_in_float64(prepared):
                return whole_model.simulated_sqnr(prepared, whole_model.observer_params(
                    prepared), calibration, outputs)

        assert checked["kept_sqnr_db"] == simulated()
        verdict = nq._bias_correction(prepared, calibration, outputs, checked["kept_sqnr_db"])
        assert verdict["kept"] and verdict["before_db"] == round(checked["kept_sqnr_db"], 2)
        assert verdict["after_db"] == round(simulated(), 2)


def test_means_recorded_in_calibration_are_the_float_runs(separable, monkeypatch):
    """The layers' float means the calibration records give the program a float run of its
    own gives, byte for byte."""
    import contextlib

    from mcu_npu.quantization import driver

    model, calibration, _ = separable
    runs = []
    run = bias_correction._run
    monkeypatch.setattr(bias_correction, "_run", lambda *a: runs.append(a[2]) or run(*a))
    recorded = _compile(model, calibration, bias_correction=True)
    assert [params is None for params in runs] == [False]  # no float run: it was recorded
    monkeypatch.setattr(driver, "float_means_recorded",
                        lambda prepared: contextlib.nullcontext({}))
    own_run = _compile(model, calibration, bias_correction=True)
    assert [params is None for params in runs] == [False, True, False]
    assert recorded.report.calibration["bias_correction"]["kept"]
    assert bytes(recorded.buffer) == bytes(own_run.buffer)


def test_bias_correction_is_refused_with_training_and_must_be_a_bool(separable):
    model, calibration, _ = separable
    with pytest.raises(ConfigError, match="does not apply to quantization-aware training"):
        mcu_npu.compile(model, calibration[0], target="imxrt700", calibration=calibration,
                        train_fn=lambda gm: None, bias_correction=True)
    with pytest.raises(ConfigError, match="bias_correction takes True or False, not 'yes'"):
        _compile(model, calibration, bias_correction="yes")


def test_cli_bias_correction_flag(separable, tmp_path):
    import numpy as np

    from helpers import run_cli

    model, calibration, _ = separable
    torch.export.save(torch.export.export(model, calibration[0]), tmp_path / "m.pt2")
    np.savez(tmp_path / "cal.npz", torch.stack([c[0] for c in calibration]).numpy())
    done = run_cli("compile", tmp_path / "m.pt2", "--target", "imxrt700", "--npu-compiler",
                   "reference", "--calibration", tmp_path / "cal.npz", "--bias-correction",
                   "-q", "-o", tmp_path / "m.pte")
    assert done.returncode == 0, done.stderr
    assert "biases corrected in 6 layer(s)" in done.stdout
