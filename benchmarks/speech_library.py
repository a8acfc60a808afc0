"""Speech models nobody here wrote: compile a list of public speech-library architectures
(SpeechBrain, random weights, 40 filterbank features x 100 frames, 8 calibration samples)
and print, per model and target, the compile status, ops on the NPU, partitions, host and
reference SQNR (all outputs of 8 held-out inputs), compile seconds (wall clock, and the
CPU seconds of the compiling process: the wall time on an idle machine) and ``.pte`` bytes; then
what stays on the CPU (op: reason, with the models it is in) and the failures by class.

Run::

    PYTHONPATH=src python benchmarks/speech_library.py                       # every model, 3 SoCs
    PYTHONPATH=src python benchmarks/speech_library.py --targets corstone-320 --jobs 2
    PYTHONPATH=src python benchmarks/speech_library.py --models ecapa_tdnn conformer

Each model is compiled in a worker process of its own (``--timeout`` seconds at most), so one
crash or hang costs one row. The model list is ``MODELS`` in ``tests/speech_library.py``;
SpeechBrain comes with the test dependencies. This script prints only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import sys
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (os.path.join(ROOT, "src"), os.path.join(ROOT, "tests")):
    while _p in sys.path:
        sys.path.remove(_p)
    sys.path.insert(0, _p)

TARGETS = ("imxrt700", "corstone-300", "corstone-320")


def _one(name: str, target: str) -> dict:
    """Compile ``name`` for ``target`` and measure it; never raises."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import speech_library

    import mcu_npu
    from mcu_npu.report import Kernel

    row = {"model": name, "target": target}
    try:
        model, example, calibration, tests = speech_library.build(name)
    except Exception as exc:  # noqa: BLE001  (the library's own failure: not ours)
        return {**row, "status": "build", "error": f"{type(exc).__name__}: {_first(exc)}"}
    t0, c0 = time.time(), time.process_time()
    try:
        prog = mcu_npu.compile(model, example, target=target, calibration=calibration)
    except Exception as exc:  # noqa: BLE001
        return {**row, "status": "fail", "seconds": time.time() - t0,
                "cpu_seconds": time.process_time() - c0,
                "error": f"{type(exc).__name__}: {_first(exc)}"}
    row["seconds"], row["cpu_seconds"] = time.time() - t0, time.process_time() - c0
    s = prog.report.summary
    row.update(status="ok", ops=s["ops_total"], npu=s["ops_on_npu"],
               partitions=s["partitions"], pte=len(prog.buffer),
               cpu=sorted({f"{o.op}: {o.reason[:90]}" for o in prog.report.ops
                           if o.kernel is not Kernel.NPU}))
    try:
        row.update(speech_library.measure(prog, model, tests))
    except Exception as exc:  # noqa: BLE001
        row.update(status="run", error=f"{type(exc).__name__}: {_first(exc)}")
    return row


def _first(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def _worker(args):
    return _one(*args)


def _fmt(row: dict) -> str:
    if row["status"] in ("fail", "build"):
        return (f"{row['model']:14} {row['target']:13} {row['status'].upper():5} "
                f"{row['error'][:140]}")
    sq = (f"{row['host_sqnr']:7.2f} {row['ref_sqnr']:7.2f}" if "host_sqnr" in row
          else f"{'-':>7} {'-':>7}")
    text = (f"{row['model']:14} {row['target']:13} {row['status']:5} "
            f"{row['npu']:4}/{row['ops']:<4} {row['partitions']:5} {sq} {row['seconds']:7.1f} "
            f"{row.get('cpu_seconds', float('nan')):6.1f} {row['pte']:10,}")
    return text + (f"  {row['error'][:80]}" if row.get("error") else "")


def main() -> None:
    import speech_library

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(speech_library.MODELS))
    ap.add_argument("--targets", nargs="*", default=list(TARGETS))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--json", help="write every row to this file as it comes")
    args = ap.parse_args()

    tasks = [(m, t) for m in args.models for t in args.targets]
    print(f"{'model':14} {'target':13} {'state':5} {'npu/ops':9} {'parts':5} "
          f"{'host dB':>7} {'ref dB':>7} {'compile':>7} {'cpu s':>6} {'pte bytes':>10}",
          flush=True)
    rows = []
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.jobs, maxtasksperchild=1) as pool:
        pending = [(task, pool.apply_async(_worker, (task,))) for task in tasks]
        for (name, target), res in pending:
            try:
                row = res.get(timeout=args.timeout)
            except mp.TimeoutError:
                row = {"model": name, "target": target, "status": "fail",
                       "error": f"Timeout: over {args.timeout:.0f} s"}
            except Exception as exc:  # noqa: BLE001  (a worker that died)
                row = {"model": name, "target": target, "status": "fail",
                       "error": f"worker {type(exc).__name__}: {_first(exc)}"}
            rows.append(row)
            print(_fmt(row), flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(row) + "\n")

    ok = [r for r in rows if r["status"] == "ok"]
    print(f"\n{len(ok)}/{len(rows)} compiled and ran "
          f"({len({r['model'] for r in rows})} models x {len(args.targets)} targets)")
    on_cpu = defaultdict(list)
    for r in ok:
        for what in r["cpu"]:
            on_cpu[what].append(f"{r['model']}@{r['target']}")
    if on_cpu:
        print("on the CPU (op: reason):")
    for what, where in sorted(on_cpu.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(where):3}  {what}\n       {', '.join(where)}")
    classes = defaultdict(list)
    for r in rows:
        if r["status"] != "ok":
            label = re.sub(r"\d+", "N", r.get("error", ""))[:140]
            classes[label].append(f"{r['model']}@{r['target']}")
    if classes:
        print("failures:")
    for label, where in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(where):3}  {label}\n       {', '.join(where)}")


if __name__ == "__main__":
    main()
