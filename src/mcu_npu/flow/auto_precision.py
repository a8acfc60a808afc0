"""Automatic mixed precision (``compile(precision="auto")``): raise the layers that buy the
most accuracy per cycle to int16 activations until an accuracy target is met within a budget.

1. Compile int8 with the per-layer error (``report.layers``): the baseline's accuracy, NPU
   cycles (Vela's total) and bytes (program without its compile report, plus peak RAM).
2. Candidates are the model's leaf modules running on the NPU in ops that convert in int16
   (ops called outside any submodule: each node on its own). A layer's sensitivity is the
   quantization noise its ops add: per op, the lowest reference SQNR among its inputs minus
   its own, summed over the layer's ops where positive. The reference (the quantized graph
   evaluated exactly) is used rather than the host run because int16 activations shrink
   quantization noise; a host departure from the reference (``gap_db``) is a conversion
   matter int16 does not address. Its cost is its share of the NPU's work times the
   baseline's cycles (int16 about doubles a layer's cycles on Ethos-U): the mean of its
   share of NPU MACs (compute-bound layers) and of NPU ops (small ops, where the per-op
   overhead dominates, as in a recurrent cell's elementwise steps).
3. Greedy by sensitivity per cost: each trial compiles the chosen layers plus the next
   candidate in int16; a trial over budget, failing, or gaining under ``MIN_GAIN_DB`` is
   dropped. Once a layer is kept, the per-layer error of the new program ranks the rest
   again: cleaning a layer moves where the noise is (the GRU keyword spotter: with its GRU
   in int16 the Linear after it, which added no measurable noise behind the int8 GRU,
   is next and brings the rest of the gain).
   The search stops when the target is met, the candidates run out or after
   ``MAX_TRIALS`` compiles.

The program returned carries the search in ``report.precision["auto"]`` (saved in its
companion file); its ops' ``precision`` fields show which ran int16.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from ..errors import ConfigError, McuNpuError, stage, warn_user
from ..graph.ids import node_id
from ..quantization.precision import INT8, INT16, AutoPrecision, PrecisionRequest

MAX_TRIALS = 8
"""Compiles the search makes beyond the int8 baseline."""
MIN_GAIN_DB = 0.1
"""SQNR a layer must add to be kept: less is within what a few samples measure by chance,
and not worth the cycles."""
LAYER_SAMPLES = 4
"""Calibration samples the per-layer error is measured on when no samples are given."""

@dataclass
class Layer:
    """A candidate: ``label`` (module path or node name), the override ``names`` that make it
    int16, its ``sensitivity`` (dB of quantization noise its ops add) and ``share`` of the
    NPU's work; ``share`` times the baseline's cycles estimates what int16 adds (16x8
    kernels take about twice an 8x8 kernel's cycles), so ``merit`` ranks by dB per cycle."""

    label: str
    names: tuple[str, ...]
    sensitivity: float = 0.0
    share: float = 0.0
    macs: int = 0
    ops: int = 0

    @property
    def merit(self) -> float:
        return self.sensitivity / max(self.share, 1e-9)


@dataclass
class _Point:
    """One compiled program's figures: ``metric`` is what the target is about."""

    prog: object
    metric: float
    sqnr_db: float | None
    accuracy: float | None
    cycles: int | None
    bytes: int | None

    def record(self) -> dict:
        out = {"sqnr_db": self.sqnr_db, "cycles": self.cycles, "bytes": self.bytes}
        if self.accuracy is not None:
            out["accuracy"] = self.accuracy
        return out


@dataclass
class _Search:
    auto: AutoPrecision
    show: bool
    steps: list = field(default_factory=list)


def search(model, example_inputs, calibration, accuracy_samples, options, *, progress,
           compile_fn: Callable):
    """Compile ``model`` with int8 activations, then raise layers to int16 as
    ``options.precision`` (an ``AutoPrecision``) says (module docstring). Returns the chosen
    ``CompiledProgram``; warns when the target is not met or the target's NPU takes int8
    only. ``compile_fn`` is ``api._compile``."""
    auto = options.precision
    if not isinstance(auto, AutoPrecision):
        raise ConfigError(f"search takes an AutoPrecision, not {type(auto).__name__}")
    tgt = options.target
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) \
        else tuple(example_inputs)
    user_layers = accuracy_samples
    compile_one = _compiler(compile_fn, model, inputs, calibration, options)
    show = bool(progress) if progress is not None else sys.stderr.isatty()
    s = _Search(auto, show)
    samples = _samples(auto.samples) if auto.samples is not None else None
    if not tgt.npu.int16_activations:
        base = _measure(s, compile_one(PrecisionRequest(), user_layers), samples, tgt)
        goal = _goal(auto, base)
        why = (f"the {tgt.npu.name} compiler takes int8 activations only: the int8 program "
               f"is returned")
        return _finish(s, base, base, goal, _budget(auto, base), [], why)
    if user_layers is None:
        user_layers = samples if samples is not None else _first_samples(calibration, inputs)
    base = _measure(s, compile_one(PrecisionRequest(), user_layers), samples, tgt)
    goal, budget = _goal(auto, base), _budget(auto, base)
    _say(s, f"int8 baseline: {_figures(base)}")
    if base.metric >= goal["value"]:
        return _finish(s, base, base, goal, budget, [], "the int8 program meets the target")
    over = _over(base, budget)
    if over:
        return _finish(s, base, base, goal, budget, [],
                       f"the int8 program is already {over}: no layer can be raised")
    ranked = candidates(base.prog)
    if not ranked:
        return _finish(s, base, base, goal, budget, [],
                       "no layer on the NPU converts with int16 activations")
    best, chosen, left = _raise_layers(
        s, lambda request: _measure(s, compile_one(request, accuracy_samples), samples, tgt),
        base, ranked, goal, budget, user_layers)
    return _finish(s, base, best, goal, budget, chosen, None, left=left)


def _compiler(compile_fn: Callable, model, inputs: tuple, calibration, options) -> Callable:
    """(request, per-layer samples) -> ``compile_fn``'s program for ``model`` with
    ``options`` at precision ``request``. With ``memory="auto"`` the first compile (the int8
    baseline) chooses the placement, and the trials keep it; they keep its plan of what runs
    where too (the same model, target and options: the trials skip planning it again), and
    start from its exported and rewritten graph."""
    compiled = 0
    chosen: dict = {}
    first: dict = {}
    started: dict = {}  # the float model and its rewritten graph, made by the first compile

    def compile_one(request: PrecisionRequest, layer_samples):
        nonlocal compiled
        compiled += 1
        trial = replace(options, precision=request,
                        memory=chosen.get("memory", options.memory))
        with stage("compiling the model", show=False):
            prog = compile_fn(model, inputs, calibration, layer_samples, trial,
                              plan=first.get("plan"), started=started)
        first.setdefault("plan", getattr(prog, "_plan", None))
        if options.memory == "auto" and not chosen:
            chosen.update(prog.report.placement)
        elif chosen:
            prog.report.placement = {**chosen, "why": f"chosen for the int8 baseline: "
                                                      f"{chosen.get('why', '')}"}
        return prog

    return compile_one


def _raise_layers(s: _Search, measure: Callable[[PrecisionRequest], _Point], base: _Point,
                  ranked: list[Layer], goal: dict, budget: dict, layer_samples):
    """The greedy search (module docstring, 3.) from the int8 ``base`` over the ``ranked``
    candidates; ``measure`` compiles and measures a request. Returns (the best point, the
    layers kept, how many candidates were left untried)."""
    chosen: list[Layer] = []
    done: set[str] = set()
    best = base
    trial = 0
    while ranked and trial < MAX_TRIALS and best.metric < goal["value"]:
        layer = ranked.pop(0)
        done.add(layer.label)
        trial += 1
        names = tuple(n for c in (*chosen, layer) for n in c.names)
        try:
            point = measure(PrecisionRequest(INT8, tuple((n, INT16) for n in names)))
        except McuNpuError as exc:
            _step(s, trial, layer, None, False, f"compile failed: {str(exc).splitlines()[0]}")
            continue
        why = _over(point, budget)
        if not why and not point.metric > best.metric + _min_gain(s.auto):
            why = f"no gain over {_value(best)}"
        _step(s, trial, layer, point, not why, why or "kept")
        if why:
            continue
        chosen.append(layer)
        best = point
        if best.metric < goal["value"] and len(ranked) > 1:  # rank again: the noise moved
            rows = _layer_rows(best.prog, layer_samples)
            if rows is not None:
                ranked = [c for c in candidates(best.prog, rows) if c.label not in done]
    return best, chosen, len(ranked)


def _min_gain(auto: AutoPrecision) -> float:
    return 0.0 if auto.accuracy_fn is not None else MIN_GAIN_DB


def _layer_rows(prog, samples) -> list[dict] | None:
    """The per-layer error of ``prog`` on ``samples`` (its own rows when it has them); None
    when it cannot be measured (the search then keeps its ranking)."""
    if prog.report.layers:
        return prog.report.layers
    try:
        with stage("measuring the per-layer error"):
            return prog.accuracy(samples)
    except McuNpuError as exc:
        warn_user(f"precision='auto': per-layer error not measured on the program with "
                  f"int16 layers ({str(exc).splitlines()[0]}); the first ranking is kept")
        return None


# -- candidates --------------------------------------------------------------------------------
def candidates(prog, rows: list[dict] | None = None) -> list[Layer]:
    """The layers of ``prog`` that can run int16 on the NPU, most accuracy per cost first,
    from the per-layer error ``rows`` (default: ``prog.report.layers``). Layers adding no
    measurable noise come last, cheapest first, if they compute (MACs): their int8 output may
    become the floor once the noise before them is gone (a Linear after a recurrent
    layer)."""
    from ..report import Kernel
    from ..tflite.registry import takes_int16

    ops = prog.report.ops
    by_id = {node_id(n): n for n in prog.reference.graph.nodes
             if n.op == "call_function" and node_id(n) is not None}
    losses = op_losses(prog.report.layers if rows is None else rows, ops)
    npu = [o for o in ops if o.kernel is Kernel.NPU]
    total_macs = sum(o.macs for o in npu) or 1
    layers: dict[str, Layer] = {}
    for o in npu:
        node = by_id.get(o.ident)
        if node is None or not takes_int16(node.target):
            continue
        path = _leaf_module(node)
        layer = layers.setdefault(path or o.ident, Layer(path or o.ident, (path or o.ident,)))
        layer.sensitivity += max(losses.get(o.node, 0.0), 0.0)
        layer.macs += o.macs
        layer.ops += 1
    for layer in layers.values():
        layer.sensitivity = round(layer.sensitivity, 2)
        layer.share = 0.5 * layer.macs / total_macs + 0.5 * layer.ops / max(len(npu), 1)
    noisy = sorted((c for c in layers.values() if c.sensitivity > 0), key=lambda c: -c.merit)
    quiet = sorted((c for c in layers.values() if c.sensitivity <= 0 and c.macs),
                   key=lambda c: c.share)
    return noisy + quiet


def op_losses(rows: list[dict], ops) -> dict[str, float]:
    """Report node -> dB of quantization noise the op adds: the lowest reference SQNR among
    its compute inputs minus its own; for an op fed by the model's inputs, its ``loss_db``
    without the host's departure from the reference (``gap_db``)."""
    by_node = {r["node"]: r for r in rows}
    out = {}
    for o in ops:
        r = by_node.get(o.node)
        if r is None or r.get("reference_sqnr_db") is None:
            continue
        own = r["reference_sqnr_db"]
        before = [by_node[i]["reference_sqnr_db"] for i in o.inputs
                  if i in by_node and by_node[i].get("reference_sqnr_db") is not None]
        before = [b for b in before if math.isfinite(b)]
        if before:
            loss = min(before) - own
        elif r.get("loss_db") is not None:
            loss = r["loss_db"] - (r.get("gap_db") or 0.0)
        else:
            continue
        if math.isfinite(loss):
            out[o.node] = loss
    return out


def _leaf_module(node) -> str:
    """The innermost module path of ``node`` ("" for an op of the model's own forward)."""
    stack = node.meta.get("nn_module_stack") or {}
    paths = [p for p, _ in stack.values() if isinstance(p, str) and p]
    return paths[-1] if paths else ""


# -- measuring ---------------------------------------------------------------------------------
def _measure(s: _Search, prog, samples, tgt) -> _Point:
    """Accuracy, cycles and bytes of ``prog``."""
    report = prog.report
    sqnr = report.accuracy.get("sqnr_db")
    if samples is not None:
        sqnr = round(host_sqnr_db(prog, samples), 2)
    accuracy = None
    if s.auto.accuracy_fn is not None:
        with stage("measuring accuracy with accuracy_fn",
                   "the exception came from accuracy_fn (see the chained exception)"):
            accuracy = float(s.auto.accuracy_fn(prog))
    metric = accuracy if accuracy is not None else sqnr
    return _Point(prog, metric, sqnr, accuracy, _cycles(report, tgt), _bytes(report))


def _cycles(report, tgt) -> int | None:
    """Vela's total NPU cycles; else the latency estimate in NPU clock cycles; else None."""
    s = report.summary
    if s.get("npu_total_cycles") is not None:
        return int(s["npu_total_cycles"])
    if s.get("latency_us") is not None and getattr(tgt.npu, "clock_hz", None):
        return int(round(s["latency_us"] * tgt.npu.clock_hz / 1e6))
    return None


def _bytes(report) -> int | None:
    """Program bytes without the compile report (its size is reserved room, alike for every
    precision) plus peak RAM."""
    flash, ram = report.memory.get("flash", {}), report.memory.get("ram", {})
    if flash.get("program") is None or ram.get("peak") is None:
        return None
    return int(flash["program"] - flash.get("report", 0) + ram["peak"])


def host_sqnr_db(prog, samples: list[tuple]) -> float:
    """SQNR (dB) of the host-run ``prog`` against its float model on ``samples``, as
    ``report.accuracy["sqnr_db"]`` is measured (all outputs)."""
    from ..estimate.metrics import flat_outputs, sqnr_db

    floats, tests = [], []
    with torch.no_grad():
        for sample in samples:
            floats += flat_outputs(prog.float_model(*sample))
            tests += flat_outputs(prog.dequantize_outputs(prog.run(*prog.quantize_inputs(*sample))))
    return sqnr_db(torch.cat(floats), torch.cat(tests))


def _samples(samples) -> list[tuple]:
    out = [(x,) if isinstance(x, torch.Tensor) else tuple(x) for x in samples]
    if not out:
        raise ConfigError("AutoPrecision.samples is empty")
    return out


def _first_samples(calibration, inputs: tuple) -> list[tuple]:
    if calibration is None:
        return [inputs]
    return [(x,) if isinstance(x, torch.Tensor) else tuple(x)
            for x in list(calibration)[:LAYER_SAMPLES]]


# -- target and budget -------------------------------------------------------------------------
def _goal(auto: AutoPrecision, base: _Point) -> dict:
    if auto.accuracy_fn is not None:
        return {"key": "accuracy", "value": float(auto.target_accuracy)}
    value = auto.target_sqnr_db if auto.target_sqnr_db is not None \
        else (base.sqnr_db if base.sqnr_db is not None else -math.inf) + auto.gain_db
    return {"key": "sqnr_db", "value": round(float(value), 2)}


def _budget(auto: AutoPrecision, base: _Point) -> dict:
    cycles = auto.max_cycles
    if cycles is None and auto.max_cycles_ratio is not None and base.cycles is not None:
        cycles = int(auto.max_cycles_ratio * base.cycles)
    return {"cycles": cycles, "bytes": auto.max_bytes,
            "cycles_unknown": base.cycles is None and (auto.max_cycles is not None
                                                      or auto.max_cycles_ratio is not None)}


def _over(p: _Point, budget: dict) -> str:
    """Why ``p`` is over ``budget`` ("" when within)."""
    if budget["cycles"] is not None and p.cycles is not None and p.cycles > budget["cycles"]:
        return f"over the cycle budget ({p.cycles:,} > {budget['cycles']:,})"
    if budget["bytes"] is not None and p.bytes is not None and p.bytes > budget["bytes"]:
        return f"over the byte budget ({p.bytes:,} > {budget['bytes']:,})"
    return ""


# -- the record --------------------------------------------------------------------------------
def _step(s: _Search, trial: int, layer: Layer, p: _Point | None, kept: bool, why: str):
    row = {"layer": layer.label, "sqnr_db": None, "cycles": None, "bytes": None,
           "kept": kept, "why": why}
    if p is not None:
        row.update(p.record())
    s.steps.append(row)
    shown = _figures(p) if p is not None else "-"
    _say(s, f"trial {trial}: + {layer.label}: {shown}: {why}")


def _finish(s: _Search, base: _Point, best: _Point, goal: dict, budget: dict,
            chosen: list[Layer], why: str | None, left: int = 0):
    """Amend the report of ``best.prog`` with the search record, warn if the target is not
    met, and return the program."""
    met = best.metric >= goal["value"]
    target_text = _target_text(goal)
    if why is None:
        where = f"{_value(best)}" + (f" at {best.cycles:,} cycles" if best.cycles else "")
        raised = ", ".join(c.label for c in chosen) or "none"
        if met:
            why = f"target met: {where} with {raised} in int16"
        else:
            tried_text = "; ".join(f"{st['layer']} ({'kept' if st['kept'] else st['why']})"
                                   for st in s.steps) or "none"
            stop = (f"; {left} more candidate(s) not tried (limit of {MAX_TRIALS} trials)"
                    if left > 0 and len(s.steps) >= MAX_TRIALS else "")
            why = (f"target {target_text} not met: best {where} within the budget; "
                   f"tried: {tried_text}{stop}")
    if budget.get("cycles_unknown"):
        why += "; the cycle budget could not be checked (no NPU cycle figure)"
    prog = best.prog
    record = {
        "target": {goal["key"]: goal["value"]},
        "budget": {"cycles": budget["cycles"], "bytes": budget["bytes"]},
        "baseline": base.record(),
        "steps": s.steps,
        "chosen": [n for c in chosen for n in c.names],
        "met": met,
        "outcome": why[:1].upper() + why[1:] + ("" if why.endswith(".") else "."),
    }
    report = prog.report
    kept = dict(report.precision.get("kept_int8", {})) if report.precision else {}
    report.precision = {"request": "auto", "kept_int8": kept, "auto": record}
    _say(s, record["outcome"])
    if not met:
        warn_user(f"precision='auto': {why}")
    return prog


def _target_text(goal: dict) -> str:
    return f"{goal['value']:.2f} dB" if goal["key"] == "sqnr_db" \
        else f"accuracy {goal['value']:.4g}"


def _value(p: _Point) -> str:
    return f"accuracy {p.accuracy:.4g}" if p.accuracy is not None else f"{p.sqnr_db:.2f} dB"


def _figures(p: _Point) -> str:
    parts = [_value(p)]
    if p.accuracy is not None and p.sqnr_db is not None:
        parts.append(f"{p.sqnr_db:.2f} dB")
    if p.cycles is not None:
        parts.append(f"{p.cycles:,} cycles")
    if p.bytes is not None:
        parts.append(f"{p.bytes:,} B")
    return ", ".join(parts)


def _say(s: _Search, text: str) -> None:
    if s.show:
        sys.stderr.write(f"precision auto: {text}\n")
        sys.stderr.flush()


__all__ = ["search", "candidates", "op_losses", "host_sqnr_db", "Layer", "MAX_TRIALS"]
