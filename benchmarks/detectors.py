"""Benchmark: does a detector fit the board? A YOLOv8-style detector
(``mcu_npu.models.detectors.yolov8``: stride 8/16/32 backbone, DFL box head, decoding in the
graph) at 160, 224 and 320 inputs, compiled for every preset (``mcu_npu.compare``, memory
placement ``auto``).

Run::

    PYTHONPATH=src python benchmarks/detectors.py
    PYTHONPATH=src python benchmarks/detectors.py --sizes 160 --targets imxrt700 corstone-300

Per input size and preset: whether it fits, the placement chosen, flash, RAM (the planned
buffers, the method allocator and the NPU's scratch; the scratch also on its own) and the
latency estimate, and where one that does not fit runs out of room; then per size the presets
it fits. Detectors are the models most often
found not to fit: their activations grow with the input's area. It prints only.
"""

from __future__ import annotations

import argparse
import sys

import mcu_npu

SIZES = (160, 224, 320)


def _kib(n) -> str:
    return "-" if n is None else f"{n / 1024:,.1f}"


def short(r) -> str:
    """Where a program that does not fit runs out of room, and by how much."""
    if r.fits or r.tightest_margin_bytes is None:
        return ""
    return f"{r.tightest_region} by {_kib(-r.tightest_margin_bytes)} KiB"


def rows_table(size: int, rows) -> list[str]:
    lines = []
    for r in rows:
        if not r.ok:
            lines.append(f"| {size} | {r.target} | failed: {r.error[:80]} | | | | | | |")
            continue
        latency = "-" if r.latency_us is None else \
            (">=" if r.latency_is_bound else "") + f"{r.latency_us / 1000:,.2f}"
        lines.append(f"| {size} | {r.target} | {'yes' if r.fits else 'NO'} | "
                     f"{r.memory_placement or '-'} | {_kib(r.flash_bytes)} | "
                     f"{_kib(r.ram_bytes)} | {_kib(r.scratch_bytes)} | {latency} | "
                     f"{short(r)} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES),
                        choices=list(SIZES))
    parser.add_argument("--targets", nargs="+", default=None,
                        help="presets (default: every one, mcu_npu.targets())")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    targets = args.targets or mcu_npu.targets()
    head = ["| input | target | fits | placed in | flash KiB | RAM KiB | NPU scratch KiB "
            "(in RAM) | latency ms | short of |", "|---|---|---|---|---|---|---|---|---|"]
    body, summary = [], []
    for size in args.sizes:
        grid = mcu_npu.compare(f"mcu_npu.models.detectors:yolov8_{size}", targets=targets,
                               workers=args.workers, progress=False)
        body += rows_table(size, grid.rows)
        fit = [r.target for r in grid.rows if r.ok and r.fits]
        placed = sorted({r.memory_placement for r in grid.rows if r.ok and r.fits} - {None})
        summary.append(f"- {size}x{size}: fits {len(fit)}/{len(grid.rows)} presets"
                       + (f" ({', '.join(fit)}; placed in {', '.join(placed)})" if fit else "")
                       + (f"; does not fit: "
                          f"{', '.join(r.target for r in grid.rows if r.ok and not r.fits)}"
                          if any(r.ok and not r.fits for r in grid.rows) else ""))
        print(f"[{size}] done", file=sys.stderr, flush=True)
    print("\nYOLOv8-style detector (3 classes, 8 channels) per input size and preset\n")
    print("\n".join(head + body))
    print("\nFits:\n" + "\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
