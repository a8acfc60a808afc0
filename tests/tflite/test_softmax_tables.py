"""A final softmax on an Ethos-U as a chain of tables (``tflite/ops/softmax.py``), chosen by
the whole model's accuracy (``flow.softmax_form``)."""

import re

import numpy as np
import pytest
import torch
import torch.nn as nn

import mcu_npu
from mcu_npu.flow import softmax_form
from mcu_npu.quantization.exact import exact_runner
from mcu_npu.tflite.ops.softmax import simulate_tables

CLASSES = 12


def _classifier() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, CLASSES),
                         nn.Softmax(-1)).eval()


def _inputs(n: int, seed: int) -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(1, 16, generator=g),) for _ in range(n)]


def _softmax_input(prog, x) -> tuple[np.ndarray, float]:
    """The int8 input of the reference's final softmax on ``x`` and its step."""
    (softmax,) = softmax_form.final_softmaxes(prog.reference).values()
    keep: dict = {}
    exact_runner(prog.reference)(x, keep=keep)
    dq = softmax.args[0]
    scale = float(dq.args[1])
    return np.round(keep[dq].double().numpy() / scale), scale


@pytest.mark.parametrize("target", ["corstone-320", "corstone-300"])
def test_a_precise_model_keeps_tflite_softmax(target):
    """A model whose logits are precise (its softmax's own rounding is most of its error) loses
    more than the contract allows with the chain, so its softmax stays TFLite's SOFTMAX."""
    model, cal = _classifier(), _inputs(16, 0)
    prog = mcu_npu.compile(model, cal[0], target=target, calibration=cal)
    (note,) = [n for n in prog.report.notes if n.startswith("final softmax")]
    assert "runs as TFLite's SOFTMAX" in note
    exact_db, tables_db = (float(v) for v in re.search(
        r"TFLite SOFTMAX ([\d.]+) dB, tables ([\d.]+) dB", note).groups())
    assert tables_db < exact_db - softmax_form.MAX_LOSS_DB


@pytest.mark.parametrize("target", ["corstone-320", "corstone-300"])
def test_the_chain_runs_as_simulated_and_is_smaller(target, monkeypatch):
    """Taken (here forced, by allowing any loss), the chain is smaller than SOFTMAX in the
    NPU's program, the host runs it within one output step of the float64 simulation the
    choice is made with, and it keeps the order of the classes."""
    model, cal = _classifier(), _inputs(16, 0)
    exact = mcu_npu.compile(model, cal[0], target=target, calibration=cal)
    monkeypatch.setattr(softmax_form, "MAX_LOSS_DB", float("inf"))
    tables = mcu_npu.compile(model, cal[0], target=target, calibration=cal)
    assert any("runs as a chain of tables" in n for n in tables.report.notes)
    assert len(tables.buffer) < len(exact.buffer) - 1500
    for (x,) in _inputs(8, 1):
        got = tables.run(x)
        got = (got[0] if isinstance(got, (list, tuple)) else got).double().numpy()
        xq, scale = _softmax_input(tables, x)
        assert np.abs(got - simulate_tables(xq, scale)).max() <= 1 / 256 + 1e-9
        # float softmax of the same int8 logits: same winner, within C/2 + 2 steps
        p = torch.softmax(torch.from_numpy(xq * scale), -1).numpy()
        assert np.argmax(got) == np.argmax(p) or got.max() == got[0, np.argmax(p)]
        assert np.abs(got - p).max() <= (CLASSES / 2 + 2) / 256


def test_a_trained_classifier_on_real_data_keeps_tflite_softmax():
    """The digits CNN, trained on real digits, with a softmax after it: confident outputs,
    where the chain's int8 sum would cost about 13 dB; SOFTMAX is kept and the program's
    SQNR equals the reference's."""
    from mcu_npu.models.trained import task

    t = task("digits_cnn")
    model = nn.Sequential(t.model, nn.Softmax(-1)).eval()
    prog = mcu_npu.compile(model, t.example(), target="corstone-320",
                           calibration=t.calibration(64))
    assert any(n.startswith("final softmax (1): runs as TFLite's SOFTMAX")
               for n in prog.report.notes)
    acc = prog.report.accuracy
    assert acc["sqnr_db"] >= acc["reference_sqnr_db"] - 1.0


def test_noisy_logits_take_the_chain_within_the_contract():
    """Four hidden layers: the logits carry more quantization noise than the chain adds
    (measured 39.22 dB with SOFTMAX, 38.37 with the chain), so the final softmax runs as the
    chain, and the program's SQNR holds the contract."""
    torch.manual_seed(0)
    layers = [nn.Linear(16, 32), nn.ReLU()]
    for _ in range(3):
        layers += [nn.Linear(32, 32), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(32, CLASSES), nn.Softmax(-1)).eval()
    cal = _inputs(16, 0)
    prog = mcu_npu.compile(model, cal[0], target="corstone-300", calibration=cal)
    (note,) = [n for n in prog.report.notes if n.startswith("final softmax")]
    assert "runs as a chain of tables" in note, note
    acc = prog.report.accuracy
    assert acc["sqnr_db"] >= acc["reference_sqnr_db"] - softmax_form.MAX_LOSS_DB


def test_a_measurement_that_fails_leaves_softmax_and_says_why(monkeypatch):
    """The chain is a saving: when its measurement fails the compile goes on with TFLite's
    SOFTMAX and the report names the failure."""
    def broken(reference):
        raise RuntimeError("no exact run here")

    model, cal = _classifier(), _inputs(16, 0)
    measured = mcu_npu.compile(model, cal[0], target="corstone-300", calibration=cal)
    monkeypatch.setattr(softmax_form, "exact_runner", broken)
    prog = mcu_npu.compile(model, cal[0], target="corstone-300", calibration=cal)
    (note,) = [n for n in prog.report.notes if n.startswith("final softmax")]
    assert note == ("final softmax (1): runs as TFLite's SOFTMAX: the chain of tables could "
                    "not be measured (RuntimeError: no exact run here)")
    # the program SOFTMAX gives: this model's measurement keeps SOFTMAX too
    assert any("runs as TFLite's SOFTMAX: the smaller chain" in n for n in measured.report.notes)
    assert prog.buffer == measured.buffer
