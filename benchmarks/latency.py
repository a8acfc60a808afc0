"""Benchmark: the whole-model latency estimate (``mcu_npu.estimate.latency``) of the four MLPerf
Tiny models, and the CPU cycle model against published Cortex-M figures.

Run::

    PYTHONPATH=src python benchmarks/latency.py                 # all models and targets
    PYTHONPATH=src python benchmarks/latency.py --models ds_cnn --targets imxrt700
    PYTHONPATH=src python benchmarks/latency.py --fit           # only the all-CPU programs:
                                                                # MACs per class, refit

Per model and target (imxrt700, corstone-300, corstone-320), compiled as the target places it
and all-CPU (``operators_not_to_delegate=["*"]``): latency_us, npu_us, cpu_us and the top
rows. Then the comparison of the all-CPU estimates with the published MLPerf Tiny latencies
(``mcu_npu.estimate.published``), each scaled linearly to the target's CPU clock, with the error
per figure; and for the autoencoder on corstone-300, Vela's compute-only ``npu_cycles``
beside its ``total_cycles`` (the latency uses the total).

``--fit`` redoes the least-squares fit (in log space) of the three per-MAC coefficients of a
core (conv, depthwise, fully connected) to its reference figure set, holding the assumed
per-element, per-byte and per-call terms, and prints the MACs per class it used.

Calibration: one sample (the example input). This script prints only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

MODELS = ("ds_cnn", "mobilenet_v1_025", "resnet8", "fc_autoencoder")
TARGETS = ("imxrt700", "corstone-300", "corstone-320")
MAC_CLASSES = ("conv", "depthwise", "fully_connected")


def compile_model(name: str, target: str, all_cpu: bool):
    import mcu_npu
    from mcu_npu.models import mlperf_tiny

    model, example = getattr(mlperf_tiny, name)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        prog = mcu_npu.compile(model, example, target=target, calibration=[example],
                               operators_not_to_delegate=["*"] if all_cpu else ())
    return prog, time.perf_counter() - t0


def print_program(name, target, all_cpu, prog, seconds, top=5):
    lat = prog.report.latency
    label = f"{name} on {target}{' (all CPU)' if all_cpu else ''}"
    print(f"\n{label}: latency {lat['latency_us']:,.1f} us = NPU {lat['npu_us']:,.1f} + "
          f"CPU {lat['cpu_us']:,.1f}   (compiled in {seconds:.1f} s)")
    for r in sorted(lat["rows"], key=lambda r: -r["us"])[:top]:
        print(f"    {r['us']:>10,.1f} us  {r['runs_on']:<9} {r['kind']:<16} {r['node']:<48} "
              f"{r['basis']}")


def class_work(prog) -> dict:
    """MACs per class and the cycles of everything else, from the estimate's rows."""
    out = {c: 0 for c in MAC_CLASSES}
    out["other_cycles"] = 0
    for r in prog.report.latency["rows"]:
        if r["runs_on"] == "cortex-m" and r["kind"] in MAC_CLASSES:
            out[r["kind"]] += r["work"]
        else:
            out["other_cycles"] += r["cycles"]
    out["calls"] = sum(1 for r in prog.report.latency["rows"] if r["kind"] in MAC_CLASSES)
    return out


def fit(core_name: str, works: dict) -> dict:
    """Per-MAC coefficients minimizing the squared log error against the reference set."""
    import numpy as np
    from scipy.optimize import minimize

    from mcu_npu.estimate.cpu_cycles import core_model
    from mcu_npu.estimate.published import REFERENCE

    core = core_model(core_name)
    figures = [f for f in REFERENCE[core_name] if f.model in works]

    def predicted(coeffs, w):
        macs = sum(c * w[k] for c, k in zip(coeffs, MAC_CLASSES))
        return macs + core.per_call * w["calls"] + w["other_cycles"]

    def loss(log_c):
        c = np.exp(log_c)
        return sum(math.log(predicted(c, works[f.model]) / f.cycles) ** 2 for f in figures)

    start = np.log([core.per_mac[k] for k in MAC_CLASSES])
    best = minimize(loss, start, method="Nelder-Mead", options={"xatol": 1e-4})
    coeffs = dict(zip(MAC_CLASSES, np.exp(best.x)))
    print(f"\nfit for {core_name} against {figures[0].board}: "
          + ", ".join(f"{k} {v:.3f}" for k, v in coeffs.items()) + " cycles/MAC")
    for f in figures:
        w = works[f.model]
        p = predicted(list(coeffs.values()), w)
        print(f"    {f.model:<18} MACs conv {w['conv']:>10,} dw {w['depthwise']:>9,} "
              f"fc {w['fully_connected']:>8,}  other {w['other_cycles']:>9,} cyc  "
              f"fit {p / 1e6:7.3f} M  published {f.cycles / 1e6:7.3f} M  "
              f"({100 * (p / f.cycles - 1):+.1f}%)")
    return coeffs


def comparison(all_cpu: dict) -> None:
    """Each published figure beside the all-CPU estimate of the same core."""
    from mcu_npu.estimate.published import FIGURES, REFERENCE
    from mcu_npu.targets import get_target

    core_targets = {}
    for target in all_cpu:
        core_targets.setdefault(get_target(target[1]).cpu.core, []).append(target)
    print("\nMODEL vs PUBLISHED (all-CPU estimate vs figure scaled to the target's CPU clock)")
    print(f"  {'model':<18} {'target':<13} {'core':<11} {'board / engine':<58} "
          f"{'published':>11} {'estimate':>11} {'error':>8}")
    for f in FIGURES:
        for key in all_cpu:
            name, target = key
            tgt = get_target(target)
            core = tgt.cpu.core
            same = core == f.core or (core == "cortex-m55" and f.core == "cortex-m85")
            if name != f.model or not same:
                continue
            est = all_cpu[key].report.latency["cpu_us"]
            pub = f.at_clock_us(tgt.cpu.clock_hz)
            ref = "*" if f in REFERENCE.get(f.core, []) else " "
            print(f"  {name:<18} {target:<13} {core:<11} {ref}{f.board + ', ' + f.engine:<57} "
                  f"{pub:>9,.0f}us {est:>9,.0f}us {100 * (est / pub - 1):>+7.1f}%")
    print("  (* = the reference set the coefficients were fitted to; the M55 of corstone-300 "
          "is compared with the M85 figures)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--targets", nargs="+", default=list(TARGETS))
    parser.add_argument("--fit", action="store_true")
    args = parser.parse_args(argv)

    all_cpu = {}
    for target in args.targets:
        for name in args.models:
            for cpu_only in ((True,) if args.fit else (False, True)):
                try:
                    prog, seconds = compile_model(name, target, cpu_only)
                except Exception as exc:  # noqa: BLE001  (a benchmark prints and goes on)
                    print(f"\n{name} on {target}: FAILED {type(exc).__name__}: {exc}")
                    continue
                print_program(name, target, cpu_only, prog, seconds)
                if cpu_only:
                    all_cpu[(name, target)] = prog
                elif name == "fc_autoencoder" and target == "corstone-300":
                    s = prog.report.summary
                    print(f"    Vela: npu_cycles {s.get('npu_cycles', 0):,} (compute only) vs "
                          f"total cycles {s.get('npu_total_cycles', 0):,} (memory bound "
                          "included; the latency uses the total)")
    if args.fit:
        from mcu_npu.targets import get_target

        by_core = {}
        for (name, target), prog in all_cpu.items():
            core = get_target(target).cpu.core
            if core in ("cortex-m33", "cortex-m85"):
                by_core.setdefault(core, {})[name] = class_work(prog)
        for core, works in by_core.items():
            fit(core, works)
    comparison(all_cpu)


if __name__ == "__main__":
    main()
