"""Models nobody here wrote: compile a public library's architectures (``--set public``: timm,
96x96 input; ``--set speech``: SpeechBrain, 40 filterbank features x 100 frames; random
weights, 8 calibration samples) and print, per model and target, the compile status, ops on
the NPU, partitions, host and reference SQNR (all outputs of 8 held-out inputs), compile
seconds (wall clock, and the CPU seconds of the compiling process: the wall time on an idle
machine) and ``.pte`` bytes; then what stays on the CPU (op: reason, with the models it is
in) and the failures by class.

Run::

    PYTHONPATH=src python benchmarks/model_library.py                       # every model, 3 SoCs
    PYTHONPATH=src python benchmarks/model_library.py --targets corstone-320 --jobs 2
    PYTHONPATH=src python benchmarks/model_library.py --models vit_tiny_patch16_224 levit_128s
    PYTHONPATH=src python benchmarks/model_library.py --sweep -j 2 --html library.html
    PYTHONPATH=src python benchmarks/model_library.py --set speech --models ecapa_tdnn conformer

Each model is compiled in a worker process of its own (``--timeout`` seconds at most), so one
crash or hang costs one row. ``--sweep`` runs the whole list x targets as one
``mcu_npu.sweep`` instead (``--jobs`` cells at a time, one per core by default, each in a
process of its own for at most ``--timeout`` seconds): the same rows, but the SQNRs are the
compile report's, over the 8 calibration samples rather than 8 held-out inputs, nothing on
what stays on the CPU, and the grid's Pareto front (latency, SQNR, RAM) and, with ``--html``,
its page follow the table. The model lists are ``MODELS`` in ``zoo/public.py`` and
``zoo/speech.py``; timm and SpeechBrain come with the test dependencies. This script prints
only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing as mp
import re
import time
from collections import defaultdict

TARGETS = ("imxrt700", "corstone-300", "corstone-320")
SETS = ("public", "speech")


def _one(model_set: str, name: str, target: str) -> dict:
    """Compile ``name`` of ``model_set`` for ``target`` and measure it; never raises."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import mcu_npu
    from mcu_npu.report import Kernel
    from zoo.public import measure

    row = {"model": name, "target": target}
    try:
        model, example, calibration, tests = _models(model_set).build(name)
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
        row.update(measure(prog, model, tests))
    except Exception as exc:  # noqa: BLE001
        row.update(status="run", error=f"{type(exc).__name__}: {_first(exc)}")
    return row


def _models(model_set: str):
    """The module of ``model_set`` (``zoo.public``, ``zoo.speech``)."""
    return importlib.import_module(f"zoo.{model_set}")


def _first(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def _worker(args):
    return _one(*args)


def _fmt(row: dict) -> str:
    if row["status"] in ("fail", "build"):
        return f"{row['model']:26} {row['target']:13} {row['status'].upper():5} {row['error'][:120]}"
    sq = (f"{row['host_sqnr']:7.2f} {row['ref_sqnr']:7.2f}" if "host_sqnr" in row
          else f"{'-':>7} {'-':>7}")
    cpu = f"{row['cpu_seconds']:6.1f}" if "cpu_seconds" in row else f"{'-':>6}"
    text = (f"{row['model']:26} {row['target']:13} {row['status']:5} {row['npu']:4}/{row['ops']:<4} "
            f"{row['partitions']:5} {sq} {row['seconds']:7.1f} {cpu} {row['pte']:10,}")
    return text + (f"  {row['error'][:80]}" if row.get("error") else "")


def _from_grid(row) -> dict:
    """A row of ``mcu_npu.sweep`` as this script's row."""
    out = {"model": row.model, "target": row.target, "seconds": row.seconds}
    if not row.ok:
        build = row.error.startswith("ConfigError: the model factory")
        return {**out, "status": "build" if build else "fail", "error": row.error}
    return {**out, "status": "ok", "ops": row.ops_total, "npu": row.ops_on_npu,
            "partitions": row.partitions, "pte": row.pte_bytes, "host_sqnr": row.sqnr_db,
            "ref_sqnr": row.reference_sqnr_db}


def _sweep(args) -> list[dict]:
    """Every model x target as one ``mcu_npu.sweep``; prints each row as it finishes."""
    import functools

    import mcu_npu
    from mcu_npu.grid.run import front_line
    from zoo import factory

    rows = []

    def show(row):
        rows.append(_from_grid(row))
        _emit(rows[-1], args)

    models = {m: functools.partial(factory, args.set, m) for m in args.models}
    start = time.time()
    grid = mcu_npu.sweep(models, args.targets, workers=args.jobs, progress=False, on_row=show,
                         timeout=args.timeout)
    print(f"\n{len(grid.rows)} cells in {time.time() - start:.0f} s wall; Pareto front "
          f"(latency, SQNR, RAM; rows that fit):")
    for r in grid.front:
        print(f"  {front_line(r)}")
    if args.html:
        with open(args.html, "w") as f:
            f.write(grid.to_html())
    return rows


def _pool(args) -> list[dict]:
    """Each model x target in a worker of a ``multiprocessing`` pool, with a timeout."""
    tasks = [(args.set, m, t) for m in args.models for t in args.targets]
    rows = []
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.jobs or 1, maxtasksperchild=1) as pool:
        pending = [(task, pool.apply_async(_worker, (task,))) for task in tasks]
        for (_, name, target), res in pending:
            try:
                row = res.get(timeout=args.timeout)
            except mp.TimeoutError:
                row = {"model": name, "target": target, "status": "fail",
                       "error": f"Timeout: over {args.timeout:.0f} s"}
            except Exception as exc:  # noqa: BLE001  (a worker that died)
                row = {"model": name, "target": target, "status": "fail",
                       "error": f"worker {type(exc).__name__}: {_first(exc)}"}
            rows.append(row)
            _emit(row, args)
    return rows


def _emit(row: dict, args) -> None:
    """Print ``row`` and, with ``--json``, append it to that file."""
    print(_fmt(row), flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row) + "\n")


def _summary(rows: list[dict], args) -> None:
    ok = [r for r in rows if r["status"] == "ok"]
    print(f"\n{len(ok)}/{len(rows)} compiled and ran "
          f"({len({r['model'] for r in rows})} models x {len(args.targets)} targets)")
    on_cpu = defaultdict(list)
    for r in ok:
        for what in r.get("cpu", ()):
            on_cpu[what].append(f"{r['model']}@{r['target']}")
    if on_cpu:
        print("on the CPU (op: reason):")
    for what, where in sorted(on_cpu.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(where):3}  {what}\n       {', '.join(where)}")
    classes = defaultdict(list)
    for r in rows:
        if r["status"] != "ok":
            classes[re.sub(r"\d+", "N", r.get("error", ""))[:140]].append(f"{r['model']}@{r['target']}")
    if classes:
        print("failures:")
    for label, where in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(where):3}  {label}\n       {', '.join(where)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=SETS, default="public",
                    help="the model set: zoo/public.py (timm) or zoo/speech.py (SpeechBrain)")
    ap.add_argument("--models", nargs="*", help="default: every model of the set")
    ap.add_argument("--targets", nargs="*", default=list(TARGETS))
    ap.add_argument("-j", "--jobs", type=int, default=None,
                    help="worker processes (default 1; with --sweep one per core)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per compile")
    ap.add_argument("--json", help="write every row to this file as it comes")
    ap.add_argument("--sweep", action="store_true",
                    help="run the whole grid as one mcu_npu.sweep (see the docstring)")
    ap.add_argument("--html", help="with --sweep: write the grid's page here")
    args = ap.parse_args()
    if args.models is None:
        args.models = list(_models(args.set).MODELS)

    print(f"{'model':26} {'target':13} {'state':5} {'npu/ops':9} {'parts':5} "
          f"{'host dB':>7} {'ref dB':>7} {'compile':>7} {'cpu s':>6} {'pte bytes':>10}",
          flush=True)
    rows = _sweep(args) if args.sweep else _pool(args)
    _summary(rows, args)


if __name__ == "__main__":
    main()
