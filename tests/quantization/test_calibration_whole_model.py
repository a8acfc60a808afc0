"""Auto's whole-model check: per-tensor ranges that each lower their own tensor's error are
kept only where they raise the model's output SQNR on the calibration samples by
``MIN_GAIN_DB``; otherwise every tensor gets MinMax's parameters back. The verdict's figures
are the real SQNRs of the two quantized references, and the report shows the verdict."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import mcu_npu
from mcu_npu.quantization import NpuQuantizer, quantize
from mcu_npu.quantization.calibration.records import CALIBRATION_KEY
from mcu_npu.quantization.calibration import whole_model
from mcu_npu.quantization.calibration.whole_model import CHECK_KEY, MIN_GAIN_DB
from mcu_npu.quantization.exact import run_exact
from tests.helpers import sqnr_db


class Readout(nn.Module):
    """A linear layer that reads one feature of its input, ``focus``, almost alone, after a
    ReLU."""

    def __init__(self, focus: int):
        super().__init__()
        self.fc = nn.Linear(16, 4)
        with torch.no_grad():
            self.fc.weight.fill_(0.01)
            self.fc.weight[:, focus] = torch.tensor([2.0, -1.0, 1.5, 3.0])
            self.fc.bias.zero_()

    def forward(self, x):
        return self.fc(torch.relu(x))


def samples(n=16, seed=0):
    """Features uniform in [0, 1], and one value of 40 (feature 0 of one row): one in 2
    million values, rare enough that a clipped range has the lower error."""
    g = torch.Generator().manual_seed(seed)
    out = [(torch.rand(8192, 16, generator=g),) for _ in range(n)]
    out[3][0][5, 0] = 40.0
    return out


def minmax_and_auto(model, data):
    refs = {m: quantize(model, data[0], data, NpuQuantizer(calibration_method=m))
            for m in ("minmax", "auto")}
    return refs["minmax"], refs["auto"]


def whole_sqnr(model, reference, data) -> float:
    with torch.no_grad():
        expected = torch.cat([model(*x).flatten() for x in data])
    return sqnr_db(expected, torch.cat([run_exact(reference, *x).flatten() for x in data]))


def input_scale(reference) -> float:
    """The scale of the ReLU's output (the linear layer's input) in ``reference``."""
    for node in reference.graph.nodes:
        if node.op == "call_function" and "quantize_per_tensor" in str(node.target) and \
                node.args[0].op == "call_function" and "relu" in str(node.args[0].target):
            return float(node.args[1])
    raise AssertionError("no quantized ReLU output")


def test_auto_ranges_that_raise_the_output_sqnr_are_kept():
    """The linear layer reads feature 5, which never holds the outlier: clipping it refines
    the step of everything the output depends on, and the verdict's figures are the real
    whole-model SQNRs of the two references."""
    model, data = Readout(focus=5).eval(), samples()
    minmax, auto = minmax_and_auto(model, data)
    verdict = auto.meta[CHECK_KEY]
    assert verdict["kept"] == "auto" and verdict["samples"] == len(data)
    assert input_scale(auto) < input_scale(minmax)
    assert verdict["auto_sqnr_db"] == round(whole_sqnr(model, auto, data), 2)
    assert verdict["minmax_sqnr_db"] == round(whole_sqnr(model, minmax, data), 2)
    assert verdict["auto_sqnr_db"] >= verdict["minmax_sqnr_db"] + MIN_GAIN_DB
    assert CHECK_KEY not in minmax.meta  # a fixed method has nothing to check


def quantize_params(reference) -> list:
    return [tuple(float(a) if isinstance(a, (int, float)) else str(a) for a in n.args[1:])
            for n in reference.graph.nodes
            if n.op == "call_function" and "quantize_per_tensor" in str(n.target)]


def test_auto_ranges_that_do_not_raise_it_enough_give_minmax_everywhere(monkeypatch):
    """Asked for more than auto's ranges gain, the check turns them down: every tensor gets
    MinMax's parameters, exactly those of ``calibration_method="minmax"``, and the records
    say so."""
    model, data = Readout(focus=5).eval(), samples()
    minmax, auto = minmax_and_auto(model, data)
    gain = auto.meta[CHECK_KEY]["auto_sqnr_db"] - auto.meta[CHECK_KEY]["minmax_sqnr_db"]
    monkeypatch.setattr(whole_model, "MIN_GAIN_DB", gain + 0.5)
    turned_down = quantize(model, data[0], data, NpuQuantizer(calibration_method="auto"))
    verdict = turned_down.meta[CHECK_KEY]
    assert verdict["kept"] == "minmax"
    assert verdict["minmax_sqnr_db"] == round(whole_sqnr(model, turned_down, data), 2)
    assert quantize_params(turned_down) == quantize_params(minmax) != quantize_params(auto)
    assert {r["method"] for r in turned_down.meta[CALIBRATION_KEY].values()} == {"minmax"}


@pytest.mark.slow
def test_the_report_says_which_ranges_were_kept(monkeypatch):
    model, data = Readout(focus=5).eval(), samples()
    prog = mcu_npu.compile(model, data[0], target="corstone-300", calibration=data,
                           calibration_method="auto", progress=False)
    check = prog.report.calibration["check"]
    assert check["kept"] == "auto" and prog.report.summary["calibration"]["kept"] == "auto"
    text = str(prog.report)
    assert "auto's ranges kept: output SQNR on 16 calibration sample(s)" in text
    assert f"{check['minmax_sqnr_db']:.2f} dB with MinMax's" in text
    again = type(prog.report).from_json(prog.report.to_json())
    assert again.calibration["check"] == check
    monkeypatch.setattr(whole_model, "MIN_GAIN_DB", 100.0)
    prog = mcu_npu.compile(model, data[0], target="corstone-300", calibration=data,
                           calibration_method="auto", progress=False)
    assert "auto's ranges turned down, MinMax everywhere" in str(prog.report)
