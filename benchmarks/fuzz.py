"""Model fuzzer: compile many random small networks and group what breaks.

Run::

    PYTHONPATH=src python benchmarks/fuzz.py                          # 2000 networks, 3 targets
    PYTHONPATH=src python benchmarks/fuzz.py --examples 300 --seed 1 --jobs 2
    PYTHONPATH=src python benchmarks/fuzz.py --targets imxrt700 --repros /tmp/fuzz_repros.py

The networks come from the strategy ``specs()`` in ``zoo/fuzz_nets.py`` (the one
``tests/test_fuzz.py`` runs a fixed few of in CI): convs (1-D / 2-D, depthwise, grouped, odd
kernels, strides and padding), linears, pooling, activations, add / mul / cat, reshapes and
permutes, means, GRU / LSTM / RNN, multi-head attention, BatchNorm, on batches of 1 to 3 or
unbatched inputs. Each is compiled for every target and checked by ``fuzz_nets.check``:
compiled or refused on purpose (``UnsupportedModelError``), loaded by ExecuTorch's runtime,
host run within the numerics contract against the quantized reference.

Specs are drawn by Hypothesis from ``--seed`` (duplicates dropped), then checked one network
per task in ``--jobs`` worker processes, each restarted after a crash, a ``--timeout`` or
50 tasks, so nothing stops the run: every failure is recorded. At the end the failures are
grouped into classes (check, exception type and first message line with numbers replaced by
``N``), each printed with its count per target and its smallest spec, which ``--shrink``
(on by default) makes smaller still by dropping blocks while the class stays the same.
``--repros FILE`` writes one runnable snippet per class; ``--json FILE`` every result as it
comes. ``--from-json FILE...`` reports saved results without drawing new ones, and
``--recheck`` reruns each class's smallest spec with the current code (a class fixed since is
marked so and not shrunk). ``kill PID`` (or Ctrl-C) stops a run and reports what ran so far.

This script prints only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import signal
import time
import traceback
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
TASKS_PER_WORKER = 50


# --- worker side ---------------------------------------------------------------------------
def _worker(conn, targets):
    """Check the specs the parent sends, one at a time; reply with a result per target."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from zoo import fuzz_nets

    conn.send("ready")
    while True:
        spec = conn.recv()
        if spec is None:
            return
        results = []
        for target in targets:
            t0 = time.time()
            try:
                status, label, message = fuzz_nets.check(spec, target), "", ""
            except fuzz_nets.FuzzFailure as exc:
                status, label = "fail", exc.kind
                message = str(exc)[len(exc.kind) + 2:]
            except Exception as exc:  # noqa: BLE001  (a bug of the check itself is a class too)
                status, label = "fail", f"check {type(exc).__name__}"
                message = (str(exc).strip().splitlines() or [""])[0]
                message += " | " + traceback.format_exc().strip().splitlines()[-3].strip()
            results.append({"target": target, "status": status, "label": label,
                            "message": message, "seconds": round(time.time() - t0, 2)})
        conn.send(results)


class Worker:
    """A spawned worker process and its pipe."""

    def __init__(self, targets):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, targets), daemon=True)
        self.proc.start()
        self.conn.recv()  # imports done
        self.tasks, self.spec, self.started = 0, None, 0.0

    def submit(self, spec):
        self.spec, self.started = spec, time.time()
        self.tasks += 1
        self.conn.send(spec)

    def stop(self):
        try:
            self.conn.send(None)
            self.proc.join(10)
        except (BrokenPipeError, OSError):
            pass
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def run_specs(specs, targets, jobs, timeout, on_result):
    """Check every spec in ``jobs`` workers; ``on_result(index, spec, results)`` per spec."""
    queue = list(enumerate(specs))
    idle, busy = [], {}
    for _ in range(min(jobs, len(queue))):
        idle.append(Worker(targets))
    while queue or busy:
        while idle and queue:
            w = idle.pop()
            i, spec = queue.pop(0)
            w.submit(spec)
            busy[w] = i
        for w in list(busy):
            results, dead = None, ""
            if w.conn.poll(0.2):
                try:
                    results = w.conn.recv()
                except (EOFError, OSError):
                    dead = f"worker died (exit code {w.proc.exitcode})"
            elif not w.proc.is_alive():
                dead = f"worker died (exit code {w.proc.exitcode})"
            elif time.time() - w.started > timeout:
                dead = f"timeout after {timeout:.0f} s"
            else:
                continue
            i = busy.pop(w)
            if results is None:
                w.proc.kill()
                w.proc.join()
                results = [{"target": "+".join(targets), "status": "fail", "label": "crash",
                            "message": dead, "seconds": round(time.time() - w.started, 2)}]
                w = Worker(targets) if queue else None
            elif w.tasks >= TASKS_PER_WORKER:
                w.stop()
                w = Worker(targets) if queue else None
            on_result(i, specs[i], results)
            if w is not None:
                if queue:
                    idle.append(w)
                else:
                    w.stop()
    for w in idle:
        w.stop()


# --- drawing specs -------------------------------------------------------------------------
def draw_specs(n, seed, min_blocks, max_blocks):
    """``n`` distinct specs drawn by Hypothesis from ``seed``."""
    import warnings

    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    from zoo import fuzz_nets

    found, seen = [], set()
    round_ = 0
    while len(found) < n and round_ < 20:
        batch = []

        @settings(max_examples=max(2 * (n - len(found)), 20), deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(fuzz_nets.specs(min_blocks=min_blocks, max_blocks=max_blocks))
        def collect(spec):
            batch.append(spec)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hseed(seed * 1000 + round_)(collect)()
        for spec in batch:
            key = repr(spec)
            if key not in seen:
                seen.add(key)
                found.append(spec)
        round_ += 1
    return found[:n]


# --- grouping ------------------------------------------------------------------------------
def normalize(text: str) -> str:
    """A failure's message with numbers, hex ids and quoted node names made generic."""
    text = re.sub(r", from \S+:\d+ \(.*?\)(?=:)", "", text)  # the model source line
    text = re.sub(r"0x[0-9a-fA-F]+", "0x", text)
    text = re.sub(r"\b[0-9a-f]{8,}\b", "<hash>", text)  # content hashes in key names
    text = re.sub(r"'(\w+?)_\d+'", r"'\1'", text)  # node names: conv2d_3 -> conv2d
    text = re.sub(r"(?<![A-Za-z_])\d+(\.\d+)?", "N", text)
    text = re.sub(r"(N, )+N", "N...", text)
    return text[:220]


def failure_class(result) -> str:
    return f"{result['label']}: {normalize(result['message'])}"


def shrink(spec, klass, targets, jobs, timeout, budget):
    """A smaller spec of the same failure class: drop one block at a time (keep a drop
    when the class stays), at most ``budget`` checks."""
    from zoo import fuzz_nets

    best = spec
    tried = 0
    improved = True
    while improved and tried < budget and len(best["blocks"]) > 1:
        improved = False
        candidates = [dict(best, blocks=best["blocks"][:k] + best["blocks"][k + 1:])
                      for k in range(len(best["blocks"]))]
        candidates = candidates[:max(0, budget - tried)]
        if not candidates:
            break
        hits = []

        def on_result(i, s, results):
            if any(r["status"] == "fail" and failure_class(r) == klass for r in results):
                hits.append((fuzz_nets.spec_size(s), i))

        run_specs(candidates, targets, jobs, timeout, on_result)
        tried += len(candidates)
        if hits:
            best = candidates[min(hits)[1]]
            improved = True
    return best


def recheck(tally, targets, jobs, timeout):
    """Rerun each class's minimal spec now; note in ``tally.now`` what it gives."""
    ordered = [k for k, _ in tally.ordered() if not k.startswith("crash")]
    specs = [tally.minimal[k] for k in ordered]

    def on_result(i, spec, results):
        klass = ordered[i]
        same = [r["target"] for r in results
                if r["status"] == "fail" and failure_class(r) == klass]
        if same:
            tally.now[klass] = f"still reproduces ({', '.join(same)})"
        else:
            got = sorted({r["status"] if r["status"] != "fail" else failure_class(r)[:80]
                          for r in results})
            tally.now[klass] = f"no longer reproduces: now {'; '.join(got)}"

    run_specs(specs, targets, jobs, timeout, on_result)


# --- output --------------------------------------------------------------------------------
REPRO = '''
# --- {n}. {klass}
#     found on: {targets}{now}
import sys
sys.path.insert(0, {benchmarks!r})  # benchmarks/ of the mcu_npu checkout, for zoo
import torch, mcu_npu
from zoo.fuzz_nets import build, check
spec = {spec!r}
model, example, calibration, tests = build(spec)
{model_comment}
# the whole fuzz check (raises FuzzFailure):  check(spec, {target!r})
prog = mcu_npu.compile(model, example, target={target!r}, calibration=calibration)
'''


def write_repros(path, classes, minimal, now):
    from zoo import fuzz_nets

    parts = ['"""Minimal specs of the failure classes benchmarks/fuzz.py found; each block is '
             'a standalone snippet."""\n']
    for n, (klass, by_target) in enumerate(classes, 1):
        spec = minimal[klass]
        model = fuzz_nets.build(spec)[0]
        comment = "\n".join("# " + line for line in str(model).splitlines())
        target = sorted(by_target, key=lambda t: -by_target[t])[0].split("+")[0]
        status = f"\n#     recheck: {now[klass]}" if klass in now else ""
        parts.append(REPRO.format(n=n, klass=klass, targets=dict(by_target), now=status,
                                  benchmarks=HERE, spec=spec, model_comment=comment, target=target))
    with open(path, "w") as f:
        f.write("".join(parts))


class Tally:
    """Results as they come: counts per target and status, failure classes (class -> target
    -> count) and each class's smallest spec."""

    def __init__(self, total: int, quiet: bool = False):
        from zoo import fuzz_nets

        self.size = fuzz_nets.spec_size
        self.total, self.quiet = total, quiet
        self.status, self.classes, self.minimal, self.seconds = Counter(), defaultdict(Counter), \
            {}, []
        self.now = {}  # class -> what its minimal spec gives with the current code

    def add(self, i, spec, results):
        for r in results:
            self.status[(r["target"], r["status"])] += 1
            self.seconds.append(r["seconds"])
            mark = {"ok": ".", "unsupported": "u"}.get(r["status"], "F")
            if mark == "F":
                klass = failure_class(r)
                self.classes[klass][r["target"]] += 1
                if klass not in self.minimal or self.size(spec) < self.size(self.minimal[klass]):
                    self.minimal[klass] = spec
            if not self.quiet:
                text = (r["label"] + ": " + r["message"])[:150] if mark == "F" else ""
                print(f"[{i + 1:4d}/{self.total}] {r['target']:13s} {mark} {r['seconds']:6.1f}s "
                      f"{text}", flush=True)

    def ordered(self):
        return sorted(self.classes.items(), key=lambda kv: -sum(kv[1].values()))

    def report(self, targets):
        print("\n== RESULTS (networks x targets)")
        for target in targets:
            row = {s: self.status[(target, s)] for s in ("ok", "unsupported", "fail")}
            print(f"  {target:13s} ok {row['ok']:5d}   unsupported {row['unsupported']:5d}   "
                  f"fail {row['fail']:5d}")
        if self.seconds:
            print(f"  compile + check time per network and target: median "
                  f"{sorted(self.seconds)[len(self.seconds) // 2]:.1f} s, "
                  f"max {max(self.seconds):.1f} s")
        ordered = self.ordered()
        print(f"\n== FAILURE CLASSES ({len(ordered)})")
        for n, (klass, by_target) in enumerate(ordered, 1):
            total = sum(by_target.values())
            per = ", ".join(f"{t} {c}" for t, c in sorted(by_target.items()))
            print(f"\n{n}. [{total}x: {per}] {klass}\n   minimal spec: {self.minimal[klass]!r}")
            if klass in self.now:
                print(f"   recheck: {self.now[klass]}")


def _as_spec(spec):
    """A spec read back from JSON (lists where tuples were)."""
    return {**spec, "input": tuple(spec["input"]),
            "blocks": [(name, dict(params)) for name, params in spec["blocks"]]}


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--targets", nargs="+", default=["imxrt700", "corstone-300", "corstone-320"],
                    help="target presets; TARGET/int16 compiles with int16 activations")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per network")
    ap.add_argument("--min-blocks", type=int, default=3)
    ap.add_argument("--max-blocks", type=int, default=7)
    ap.add_argument("--shrink", type=int, default=12,
                    help="checks spent shrinking each class's smallest spec (0: off)")
    ap.add_argument("--repros", help="write one runnable snippet per failure class here")
    ap.add_argument("--json", help="write every result here (JSON lines, as they come)")
    ap.add_argument("--recheck", action="store_true",
                    help="rerun each class's minimal spec with the current code, say "
                         "whether the class still reproduces, shrink only those that do")
    ap.add_argument("--from-json", nargs="+", metavar="FILE",
                    help="run nothing: report (and shrink) the results --json files hold")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # kill PID: stop and report what ran so far
    signal.signal(signal.SIGINT, _interrupt)

    t0 = time.time()
    if args.from_json:
        rows = [json.loads(line) for path in args.from_json for line in open(path) if line.strip()]
        tally = Tally(len(rows), quiet=True)
        for row in rows:
            tally.add(row["index"], _as_spec(row["spec"]), row["results"])
        targets = sorted({r["target"] for row in rows for r in row["results"]
                          if "+" not in r["target"]})
        print(f"{len(rows)} networks read from {', '.join(args.from_json)}")
    else:
        targets = args.targets
        specs = draw_specs(args.examples, args.seed, args.min_blocks, args.max_blocks)
        print(f"{len(specs)} distinct networks drawn (seed {args.seed}) in "
              f"{time.time() - t0:.0f} s; targets {', '.join(targets)}; {args.jobs} worker(s)",
              flush=True)
        tally = Tally(len(specs))
        log = open(args.json, "w") if args.json else None

        def on_result(i, spec, results):
            tally.add(i, spec, results)
            if log:
                log.write(json.dumps({"index": i, "spec": spec, "results": results}) + "\n")
                log.flush()

        try:
            run_specs(specs, targets, args.jobs, args.timeout, on_result)
        except KeyboardInterrupt:
            print("interrupted: reporting what ran so far", flush=True)
            for child in mp.active_children():
                child.kill()
        if log:
            log.close()
    if args.recheck and tally.classes:
        try:
            recheck(tally, targets, args.jobs, args.timeout)
        except KeyboardInterrupt:
            print("recheck interrupted", flush=True)
            for child in mp.active_children():
                child.kill()
    if args.shrink:
        try:
            for klass, by_target in tally.ordered():
                if klass.startswith("crash") or \
                        tally.now.get(klass, "still").startswith("no longer"):
                    continue  # a crash costs a worker each try; a fixed class is not shrunk
                on = [t for t in by_target if t in targets] or targets
                tally.minimal[klass] = shrink(tally.minimal[klass], klass, on[:1], args.jobs,
                                              args.timeout, args.shrink)
        except KeyboardInterrupt:
            print("shrinking interrupted", flush=True)
            for child in mp.active_children():
                child.kill()
    tally.report(targets)
    if args.repros and tally.classes:
        write_repros(args.repros, tally.ordered(), tally.minimal, tally.now)
        print(f"\nrepro snippets: {args.repros}")
    print(f"\ntotal {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
