"""``compile(precision="auto")``: the search raises layers to int16 until the SQNR (or an
accuracy function) reaches its target within the cycle budget, and records what it tried.

The acceptance case is the 2-layer GRU-64 keyword spotter on Corstone-300 (Ethos-U55, Vela);
the fast cases use a three-Linear MLP."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from torch import nn

from helpers import assert_warned_at
import mcu_npu
from mcu_npu import AutoPrecision, ConfigError
from mcu_npu.flow import quantize as quantize_flow
from mcu_npu.flow import run as run_flow
from mcu_npu.flow.auto_precision import op_losses
from mcu_npu.graph.ids import node_id
from mcu_npu.estimate.metrics import sqnr_db
from mcu_npu.report import OpPlacement

from zoo.model_compiles import KeywordSpotter


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.relu(self.fc1(x)))))


def _mlp():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    return MLP().eval(), [(torch.randn(1, 16, generator=g),) for _ in range(8)]


def _module_ops(prog, module: str) -> list[OpPlacement]:
    """The report's ops inside ``module`` (by the quantized reference's module stacks)."""
    inside = {node_id(n) for n in prog.reference.graph.nodes
              if n.op == "call_function" and any(
                  p == module or p.startswith(module + ".")
                  for p, _ in (n.meta.get("nn_module_stack") or {}).values())}
    return [o for o in prog.report.ops if o.ident in inside]


# -- acceptance: the GRU keyword spotter -------------------------------------------------------
ONE_KWS_SEARCH = pytest.mark.xdist_group("auto_precision_kws")
"""The tests of the ``kws`` search run in one worker (``--dist loadgroup``): it is searched
once, not once per worker."""


@pytest.fixture(scope="module")
def kws():
    torch.manual_seed(0)
    model = KeywordSpotter().eval()
    g = torch.Generator().manual_seed(1)
    cal = [(torch.randn(1, 49, 40, generator=g),) for _ in range(16)]
    # The cycle budget is relative to int8 in the same placement. This acceptance holds with
    # the weights read from flash (upstream's default memory mode): with them in SRAM, int8
    # runs 5.5x faster and the int16 GRU takes 2.2x its cycles, over the 1.5x budget.
    prog = mcu_npu.compile(model, cal[0], target="corstone-300", calibration=cal,
                           precision="auto", memory="flash")
    return prog, cal


@pytest.mark.slow
@ONE_KWS_SEARCH
def test_kws_meets_the_target_within_budget(kws):
    prog, _ = kws
    auto = prog.report.precision["auto"]
    base = auto["baseline"]
    assert auto["target"] == {"sqnr_db": round(base["sqnr_db"] + 6.0, 2)}
    assert auto["budget"]["cycles"] == int(1.5 * base["cycles"])
    assert auto["met"] and auto["chosen"]
    assert prog.report.accuracy["sqnr_db"] >= auto["target"]["sqnr_db"]
    assert prog.report.summary["npu_total_cycles"] <= auto["budget"]["cycles"]
    kept = [s for s in auto["steps"] if s["kept"]]
    assert [s["layer"] for s in kept] == auto["chosen"]
    assert kept[-1]["sqnr_db"] == prog.report.accuracy["sqnr_db"]
    assert len(auto["steps"]) <= 3  # the search stays short on this model


@pytest.mark.slow
@ONE_KWS_SEARCH
def test_kws_chosen_layers_run_int16(kws):
    prog, _ = kws
    report = prog.report
    kept_int8 = report.precision["kept_int8"]
    for layer in report.precision["auto"]["chosen"]:
        ops = [o for o in _module_ops(prog, layer) if o.ident not in kept_int8]
        assert ops and all(o.precision == "int16" for o in ops), layer
    assert report.summary["int16_ops"] > 0
    assert "precision auto:" in str(report) and "auto: target SQNR" in str(report)


@pytest.mark.slow
@ONE_KWS_SEARCH
def test_kws_record_survives_load_and_runs_the_same(kws):
    prog, cal = kws
    loaded = mcu_npu.load(prog.buffer, companion=prog.companion)
    assert loaded.report.precision == prog.report.precision
    assert [o.precision for o in loaded.report.ops] == [o.precision for o in prog.report.ops]
    fresh = mcu_npu.load(bytes(prog.buffer), companion=prog.companion)
    for (x,) in cal[:2]:
        for a, b in zip(prog.run(x), fresh.run(x)):
            assert torch.equal(a, b)


# -- fast cases --------------------------------------------------------------------------------
def test_unreachable_target_returns_the_best_within_budget():
    model, cal = _mlp()
    with pytest.warns(UserWarning, match=r"target \S+ dB not met: best .* within the budget") \
            as caught:
        line = inspect.currentframe().f_lineno + 1
        prog = mcu_npu.compile(model, cal[0], target="corstone-300", calibration=cal,
                               precision=AutoPrecision(gain_db=60.0))
    assert_warned_at(caught, "not met", __file__, line)
    auto = prog.report.precision["auto"]
    assert auto["met"] is False
    assert auto["target"]["sqnr_db"] == round(auto["baseline"]["sqnr_db"] + 60.0, 2)
    assert auto["steps"] and "not met" in auto["outcome"]
    assert prog.report.summary["npu_total_cycles"] <= auto["budget"]["cycles"]
    kept = [s for s in auto["steps"] if s["kept"]]
    best = kept[-1]["sqnr_db"] if kept else auto["baseline"]["sqnr_db"]
    assert prog.report.accuracy["sqnr_db"] == best
    assert all(s["sqnr_db"] <= best for s in auto["steps"] if not s["kept"]
               and s["cycles"] <= auto["budget"]["cycles"])
    assert mcu_npu.load(prog.buffer, companion=prog.companion).report.precision["auto"] == auto


def test_over_budget_layers_are_dropped():
    model, cal = _mlp()
    with pytest.warns(UserWarning, match="not met"):
        prog = mcu_npu.compile(model, cal[0], target="corstone-300", calibration=cal,
                               precision=AutoPrecision(gain_db=60.0, max_cycles_ratio=1.001))
    auto = prog.report.precision["auto"]
    assert auto["steps"] and auto["chosen"] == []
    for step in auto["steps"]:
        assert not step["kept"] and step["why"].startswith("over the cycle budget")
        assert step["cycles"] > auto["budget"]["cycles"]
    assert prog.report.summary.get("int16_ops", 0) == 0
    assert prog.report.accuracy["sqnr_db"] == auto["baseline"]["sqnr_db"]


def test_accuracy_function_target(monkeypatch):
    model, cal = _mlp()
    g = torch.Generator().manual_seed(2)
    held_out = [torch.randn(1, 16, generator=g) for _ in range(8)]

    def accuracy(prog) -> float:
        with torch.no_grad():
            floats = torch.cat([model(x).flatten() for x in held_out])
        return sqnr_db(floats, torch.cat([prog.run(x)[0].flatten() for x in held_out]))

    planned = []
    trial = quantize_flow.trial
    monkeypatch.setattr(quantize_flow, "trial", lambda *a, **k: planned.append(1) or trial(*a, **k))
    exported = []
    export = run_flow.export
    monkeypatch.setattr(run_flow, "export", lambda *a, **k: exported.append(1) or export(*a, **k))
    prog = mcu_npu.compile(model, cal[0], target="corstone-300", calibration=cal,
                           precision=AutoPrecision(accuracy_fn=accuracy, target_accuracy=37.0))
    auto = prog.report.precision["auto"]
    assert auto["target"] == {"accuracy": 37.0}
    assert auto["baseline"]["accuracy"] < 37.0  # the premise: int8 alone falls short
    assert auto["met"] and auto["chosen"]
    assert accuracy(prog) >= 37.0
    assert all("accuracy" in s for s in auto["steps"])
    # the trials reuse the baseline's plan (one trial quantization in all) and its exported
    # and rewritten graph (one export), and the program is the one a compile asking for the
    # chosen layers in int16 exports, plans and gives
    assert len(planned) == 1 and len(exported) == 1 and len(auto["steps"]) >= 1
    asked = mcu_npu.compile(model, cal[0], target="corstone-300", calibration=cal,
                            precision={"overrides": {layer: "int16" for layer in auto["chosen"]}})
    assert len(planned) == 2 and len(exported) == 2
    assert asked.buffer == prog.buffer


def test_int8_only_npu_returns_int8_and_says_why():
    model, cal = _mlp()
    with pytest.warns(UserWarning, match="takes int8 activations only"):
        prog = mcu_npu.compile(model, cal[0], target="imxrt700", calibration=cal,
                               precision="auto")
    auto = prog.report.precision["auto"]
    assert auto["steps"] == [] and auto["chosen"] == [] and auto["met"] is False
    assert "int8 activations only" in auto["outcome"]
    assert all(o.precision in ("int8", "") for o in prog.report.ops)
    assert prog.report.summary["int16_ops"] == 0


@pytest.mark.parametrize("kwargs, match", [
    ({"accuracy_fn": lambda p: 0.0}, "together"),
    ({"target_accuracy": 0.9}, "together"),
    ({"accuracy_fn": lambda p: 0.0, "target_accuracy": 0.9, "target_sqnr_db": 40.0}, "not both"),
    ({"max_cycles_ratio": -1.0}, "max_cycles_ratio must be positive"),
    ({"max_cycles": 0}, "max_cycles must be positive"),
    ({"max_bytes": -5}, "max_bytes must be positive"),
])
def test_auto_precision_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        AutoPrecision(**kwargs)


def test_op_losses_use_the_reference_and_drop_the_host_gap():
    """Loss of an op: lowest reference SQNR of its inputs minus its own; an op fed by the
    model's inputs: its loss_db without gap_db."""
    ops = [OpPlacement("a", "aten.linear", "NPU partition 0", "npu"),
           OpPlacement("b", "aten.relu", "NPU partition 0", "npu", inputs=("a",)),
           OpPlacement("c", "aten.add.Tensor", "NPU partition 0", "npu", inputs=("a", "b"))]
    rows = [{"node": "a", "reference_sqnr_db": 40.0, "loss_db": 45.0, "gap_db": 40.0},
            {"node": "b", "reference_sqnr_db": 38.0, "loss_db": 30.0, "gap_db": 1.0},
            {"node": "c", "reference_sqnr_db": 35.5, "loss_db": 1.0, "gap_db": 0.0}]
    losses = op_losses(rows, ops)
    assert losses == {"a": 5.0, "b": 2.0, "c": 2.5}
    rows[0]["reference_sqnr_db"] = math.inf  # an exact input counts as no input
    losses = op_losses(rows, ops)
    assert losses["b"] == 29.0 and losses["c"] == 2.5
