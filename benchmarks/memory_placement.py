"""Benchmark: where the program lives (``compile(..., memory=)``) per MLPerf Tiny model and
target, against upstream ExecuTorch's default compile.

Run::

    PYTHONPATH=src python benchmarks/memory_placement.py
    PYTHONPATH=src python benchmarks/memory_placement.py --models ds_cnn \\
        --targets corstone-300 --no-upstream --json out.json

For each model (``mcu_npu.models.mlperf_tiny``) and target (corstone-300, corstone-320,
imxrt700), with the same weights and ``--samples`` calibration samples everywhere:

* one compile per placement the target offers (``memory="flash"``, ``"sram"``,
  ``"dedicated-sram"``): the whole-model latency estimate (``report.latency``: Vela's
  cycles for the memory mode plus the Cortex-M rows), the ``.pte`` bytes, each region's need
  and whether the program fits the target's memory map, and the compile's wall time;
* ``memory="auto"``: the placement it chose, its latency, and its compile time against the
  single compile of the placement it chose (``auto / single``);
* upstream: ExecuTorch's Arm flow with its default compile spec for the NPU
  (``_upstream_arm.arm_flow``, a cell of ``mcu_npu.grid`` in a process of its own):
  Vela's time for its partitions (its CPU ops are not timed: a lower bound of its
  latency). The i.MX RT700 has none here: upstream's NXP flow needs NXP's converter.

At the end, the geometric mean of auto's latency over upstream's on corstone-300. Figures
are estimates that depend on the model and the compilers, not on the machine, except the
compile times. This script prints only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
import warnings

from ethos_u import FLOWS, MLPERF, figures, model_factory
from mcu_npu.grid import Cell
from mcu_npu.grid.run import run_grid

TARGETS = ("corstone-300", "corstone-320", "imxrt700")
UPSTREAM_NPU = {"corstone-300": "ethos-u55-128", "corstone-320": "ethos-u85-256"}


def ours(model, example, calibration, target: str, memory: str) -> dict:
    import mcu_npu

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = mcu_npu.compile(model, example, target=target, calibration=calibration,
                               memory=memory)
    seconds = time.perf_counter() - t0
    report = prog.report
    return {"memory": report.placement["memory"], "seconds": round(seconds, 2),
            "latency_us": report.latency.get("latency_us"),
            "npu_us": report.latency.get("npu_us"), "pte": len(prog.buffer),
            "fits": report.memory["summary"]["memory_fits"],
            "needs": {r["name"]: r["need"] for r in report.memory["regions"]},
            "why": report.placement.get("why", ""), "tried": report.placement.get("tried")}


def _n(v, unit="") -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}{unit}" if isinstance(v, float) else f"{v:,}{unit}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MLPERF), choices=MLPERF)
    ap.add_argument("--targets", nargs="+", default=list(TARGETS), choices=TARGETS)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--no-upstream", action="store_true")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    from mcu_npu.targets import get_target

    results: dict = {}
    ratios = []
    head = f"{'model':<17} {'target':<13} {'memory':<15} {'latency us':>11} {'.pte B':>9} " \
           f"{'fits':>4} {'compile s':>9}  needs per region"
    print(head)
    for name in args.models:
        model, example, calibration = model_factory(name, args.samples, args.seed)
        factory = functools.partial(model_factory, name, args.samples, args.seed)
        for target in args.targets:
            rows = {p: ours(model, example, calibration, target, p)
                    for p in get_target(target).placements}
            auto = ours(model, example, calibration, target, "auto")
            up = None
            if not args.no_upstream and target in UPSTREAM_NPU:
                cell = Cell(factory, UPSTREAM_NPU[target], flow=FLOWS["upstream"])
                up = figures(run_grid([cell], "upstream", timeout=args.timeout,
                                      progress=False).rows[0])
            results[f"{name}|{target}"] = {"placements": rows, "auto": auto,
                                           "upstream": up}
            for p, r in rows.items():
                needs = ", ".join(f"{k} {v:,}" for k, v in r["needs"].items())
                print(f"{name:<17} {target:<13} {p:<15} {_n(r['latency_us']):>11} "
                      f"{_n(r['pte']):>9} {'yes' if r['fits'] else 'NO':>4} "
                      f"{r['seconds']:>9.1f}  {needs}")
            single = rows[auto["memory"]]["seconds"]
            print(f"{'':<17} {target:<13} {'auto -> ' + auto['memory']:<15} "
                  f"{_n(auto['latency_us']):>11} {_n(auto['pte']):>9} "
                  f"{'yes' if auto['fits'] else 'NO':>4} {auto['seconds']:>9.1f}  "
                  f"auto / single compile {auto['seconds'] / single:.2f}x; {auto['why']}")
            if up is not None:
                if up.get("ok", True) and up.get("inference_time_us"):
                    ratio = auto["latency_us"] / up["inference_time_us"]
                    if target == "corstone-300":
                        ratios.append(ratio)
                    print(f"{'':<17} {target:<13} {'upstream':<15} "
                          f"{_n(up['inference_time_us']):>11} {_n(up.get('pte_bytes')):>9} "
                          f"{'':>4} {up.get('compile_s', 0):>9.1f}  auto / upstream "
                          f"{ratio:.2f}x; NPU parts alone {auto['npu_us']:,.1f} / "
                          f"{up['inference_time_us']:,.1f} us = "
                          f"{auto['npu_us'] / up['inference_time_us']:.2f}x (upstream: "
                          f"Vela time of its partitions, {up.get('ops_on_cpu', '?')} CPU "
                          f"ops untimed; ours: whole model, CPU rows included)")
                else:
                    print(f"{'':<17} {target:<13} upstream FAILED: {up.get('error')}")
            sys.stdout.flush()
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\ncorstone-300: auto's latency over upstream's default compile, geometric "
              f"mean over {len(ratios)} models: {geo:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
        print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
