"""``mcu_npu.compare`` and ``mcu_npu.sweep`` at work: MobileNetV1-0.25 (MLPerf Tiny VWW)
compared across every target preset, then the MLPerf Tiny, signal and block reference models
swept over four targets twice, with one worker process and with the pool (``-j``, one per
core by default), printing both wall times, whether the two runs gave the same rows (they
must: compiles are deterministic) and the Pareto front (latency, SQNR, RAM).

Run::

    PYTHONPATH=src python benchmarks/sweep.py                  # both parts
    PYTHONPATH=src python benchmarks/sweep.py --part compare --html compare.html
    PYTHONPATH=src python benchmarks/sweep.py --part sweep -j 2 --html sweep.html
    PYTHONPATH=src python benchmarks/sweep.py --part sweep --ray local   # and on Ray

Every model is calibrated on 8 standard-normal samples (seed 0); SQNR and top-1 agreement
are the compile report's, over those samples. Wall times depend on the machine and on what
else runs on it; this script prints them and asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import os
import time

SWEEP_TARGETS = ("imxrt700", "corstone-300", "corstone-320", "ethos-u55-64")
SWEEP_MODELS = ("ds_cnn", "mobilenet_v1_025", "resnet8", "fc_autoencoder", "eegnet_style",
                "gated_temporal_block", "inception_time_1d", "unet_1d")
CALIBRATION = 8


def calibrated(name: str):
    """``(model, example inputs, 8 standard-normal calibration samples)`` of the reference
    model ``name`` (``mcu_npu.models``); sent to workers as ``partial(calibrated, name)``."""
    import torch

    from mcu_npu.models import BLOCK_MODELS, MODELS, SIGNAL_MODELS

    model, example = {**MODELS, **SIGNAL_MODELS, **BLOCK_MODELS}[name]()
    g = torch.Generator().manual_seed(0)
    samples = [tuple(torch.randn(x.shape, generator=g) for x in example)
               for _ in range(CALIBRATION)]
    return model, samples[0], samples


def run_compare(args) -> None:
    import mcu_npu

    start = time.time()
    grid = mcu_npu.compare(functools.partial(calibrated, "mobilenet_v1_025"),
                           targets=args.compare_targets or mcu_npu.targets(),
                           workers=args.jobs, progress=True)
    print(grid)
    print(f"\n{len(grid.rows)} targets in {time.time() - start:.0f} s wall")
    _write(args.html, grid)


def run_sweep(args) -> None:
    import mcu_npu

    models = {m: functools.partial(calibrated, m) for m in args.models}
    runs = {}
    executors = [("1 worker", "process", 1), ("pool", "process", args.jobs)]
    if args.ray:
        executors.append(("ray", "ray", None))
    for label, executor, workers in executors:
        start = time.time()
        grid = mcu_npu.sweep(models, args.targets, executor=executor, workers=workers,
                             ray_address=args.ray if executor == "ray" else None,
                             progress=True)
        runs[label] = (grid, time.time() - start)
        print(f"== {label} ({workers or 'one per core'}): {len(grid.rows)} cells in "
              f"{runs[label][1]:.0f} s wall", flush=True)
    grid = runs["pool"][0]
    print(grid)
    same = all(run.rows == grid.rows for run, _ in runs.values())
    times = ", ".join(f"{label} {seconds:.0f} s" for label, (_, seconds) in runs.items())
    print(f"\nwall time: {times} ({os.cpu_count()} cores, shared with whatever else runs); "
          f"rows identical: {same}")
    _write(args.html, grid)


def _write(path, grid) -> None:
    if path:
        with open(path, "w") as f:
            f.write(grid.to_html())
        print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("compare", "sweep", "both"), default="both")
    ap.add_argument("--models", nargs="*", default=list(SWEEP_MODELS))
    ap.add_argument("--compare-targets", nargs="*",
                    help="the targets of the comparison (default: every preset)")
    ap.add_argument("--targets", nargs="*", default=list(SWEEP_TARGETS))
    ap.add_argument("-j", "--jobs", type=int, default=None,
                    help="worker processes of the pool (default: one per core)")
    ap.add_argument("--html", help="write the (last) grid's page here")
    ap.add_argument("--ray", metavar="ADDRESS",
                    help="also run the sweep as Ray tasks ('local': a Ray instance here)")
    args = ap.parse_args()
    if args.part in ("compare", "both"):
        run_compare(args)
    if args.part in ("sweep", "both"):
        run_sweep(args)


if __name__ == "__main__":
    main()
