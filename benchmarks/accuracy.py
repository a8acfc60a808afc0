"""Benchmark: accuracy against the float model, and NPU cycles, per activation precision.

Run::

    PYTHONPATH=src python benchmarks/accuracy.py                      # every model
    PYTHONPATH=src python benchmarks/accuracy.py --models ds_cnn gru64x2_t49
    PYTHONPATH=src python benchmarks/accuracy.py --target corstone-320 --calibration 8

Models: the four MLPerf Tiny models (``mcu_npu.models.mlperf_tiny.MODELS``), the 2-layer
GRU-64 classifier of ``ethos_u.py`` (``gru64x2_t49``), the LSTM-32 classifier of
``compile_time.py`` (``lstm32_t20``) and ``softmax512``: a Linear scoring 512 positions per
query (as attention scores do) with a softmax over them, then a Linear head.

Each model is compiled for ``--target`` (corstone-300: Ethos-U55-128, Vela) four ways:

* int8:      ``precision=None``;
* rec int16: ``precision={"default": "int8", "overrides": {<recurrent module>: "int16"}}``
             ("-" for a model without a GRU or LSTM);
* auto:      ``precision="auto"`` (int8 SQNR + 6 dB within 1.5x the int8 cycles);
* int16:     ``precision="int16"``.

Columns: SQNR (dB) of the host-run ``.pte`` against the float model
(``report.accuracy["sqnr_db"]``) and of the quantized reference (``reference_sqnr_db``),
both on the first 4 calibration samples; Vela's total NPU cycles (``npu_total_cycles``);
ops with int16 activations out of all compute ops; compile seconds (wall clock in one
process: the first compile of the run also pays the imports, and a model's later compiles
find caches warm; auto includes every trial). Below the table: for every variant, the
ops asked for int16 that stay int8, with the reason, and what the auto search chose.
Calibration: ``--calibration`` (16) standard-normal samples from
``torch.Generator().manual_seed(0)``. It prints only and asserts nothing; a failing compile
prints its error in its row.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import torch
from torch import nn

from mcu_npu.models.mlperf_tiny import MODELS as MLPERF_TINY

MLPERF = tuple(MLPERF_TINY)  # ds_cnn, mobilenet_v1_025, resnet8, fc_autoencoder
MODELS = (*MLPERF, "gru64x2_t49", "lstm32_t20", "softmax512")
RECURRENT = {"gru64x2_t49": "gru", "lstm32_t20": "lstm"}
VARIANTS = ("int8", "rec int16", "auto", "int16")


class SoftmaxScores(nn.Module):
    """Scores of 4 queries over 512 positions (Linear 64 -> 512), a softmax over the 512,
    then a Linear 512 -> 10 head."""

    def __init__(self):
        super().__init__()
        self.scores = nn.Linear(64, 512)
        self.head = nn.Linear(512, 10)

    def forward(self, x):
        return self.head(torch.softmax(self.scores(x), dim=-1))


def build(name: str):
    """(model, example_inputs) of a benchmark model, deterministic."""
    if name == "softmax512":
        with torch.random.fork_rng():
            torch.manual_seed(0)
            return SoftmaxScores().eval(), (torch.randn(1, 4, 64),)
    if name == "lstm32_t20":
        from compile_time import build as build_other
    else:
        from ethos_u import build_model as build_other
    model, example = build_other(name)
    example = (example,) if isinstance(example, torch.Tensor) else tuple(example)
    return model.eval(), example


def precision_of(variant: str, name: str):
    if variant == "int8":
        return None
    if variant == "rec int16":
        module = RECURRENT.get(name)
        return None if module is None else {"default": "int8", "overrides": {module: "int16"}}
    return variant  # "auto", "int16"


def run(name: str, variant: str, target: str, calibration: list[tuple]) -> dict:
    """One compile's figures, or {"error": ...}."""
    import mcu_npu

    precision = precision_of(variant, name)
    if variant == "rec int16" and precision is None:
        return {"skipped": True}
    model, example = build(name)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the auto search's outcome is printed below
            prog = mcu_npu.compile(model, example, target=target, calibration=calibration,
                                   precision=precision)
    except Exception as exc:  # noqa: BLE001  (a benchmark prints every failure)
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}
    seconds = time.perf_counter() - start
    r = prog.report
    s = r.summary
    return {"sqnr": r.accuracy.get("sqnr_db"), "ref": r.accuracy.get("reference_sqnr_db"),
            "cycles": s.get("npu_total_cycles"), "int16": s.get("int16_ops", 0),
            "ops": s["ops_total"], "kept": dict((r.precision or {}).get("kept_int8", {})),
            "auto": (r.precision or {}).get("auto"), "seconds": seconds}


def _num(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def table(results: dict, names: list[str]) -> list[str]:
    header = ("model", "precision", "SQNR dB", "ref dB", "NPU cycles", "vs int8", "int16 ops",
              "compile s")
    rows = [header]
    for name in names:
        base = results.get((name, "int8"), {}).get("cycles")
        for variant in VARIANTS:
            r = results.get((name, variant))
            if r is None:
                continue
            if r.get("skipped"):
                rows.append((name, variant, "-", "-", "-", "-", "-", "-"))
                continue
            if "error" in r:
                rows.append((name, variant, "failed", "", "", "", "", r["error"][:70]))
                continue
            ratio = f"{r['cycles'] / base:.3f}x" if r["cycles"] and base else "-"
            rows.append((name, variant, _num(r["sqnr"], ".2f"), _num(r["ref"], ".2f"),
                         _num(r["cycles"], ","), ratio, f"{r['int16']}/{r['ops']}",
                         f"{r['seconds']:.0f}"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]


def notes(results: dict, names: list[str]) -> list[str]:
    """Ops kept int8 (grouped by reason) and the auto search's choice, per model."""
    lines = []
    for name in names:
        for variant in VARIANTS:
            r = results.get((name, variant)) or {}
            by_reason: dict[str, list[str]] = {}
            for node, reason in r.get("kept", {}).items():
                by_reason.setdefault(reason, []).append(node)
            for reason, nodes in by_reason.items():
                shown = ", ".join(nodes[:3]) + (f" (+{len(nodes) - 3})" if len(nodes) > 3
                                                else "")
                lines.append(f"{name} [{variant}] {len(nodes)} kept int8: {shown}: {reason}")
            auto = r.get("auto")
            if auto:
                tried = ", ".join(f"{st['layer']}:{'kept' if st['kept'] else 'dropped'}"
                                  for st in auto.get("steps", [])) or "nothing"
                lines.append(f"{name} [auto] tried {tried}; chosen "
                             f"{auto.get('chosen') or 'none'}; met {auto.get('met')}: "
                             f"{auto.get('outcome')}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--target", default="corstone-300")
    parser.add_argument("--calibration", type=int, default=16,
                        help="standard-normal calibration samples (seed 0)")
    args = parser.parse_args(argv)
    from ethos_u import calibration_set

    results = {}
    for name in args.models:
        _, example = build(name)
        calibration = calibration_set(example, args.calibration, seed=0)
        for variant in VARIANTS:
            results[(name, variant)] = r = run(name, variant, args.target, calibration)
            shown = r.get("error") or ("-" if r.get("skipped") else
                                       f"{_num(r['sqnr'], '.2f')} dB, "
                                       f"{_num(r['cycles'], ',')} cycles")
            print(f"[{name} {variant}] {shown}", file=sys.stderr, flush=True)
    print(f"\nSQNR against the float model and NPU cycles on {args.target} "
          f"({args.calibration} calibration samples)\n")
    print("\n".join(table(results, args.models)))
    print()
    print("\n".join(notes(results, args.models)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
