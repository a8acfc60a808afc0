"""Benchmark: compile seconds per model and target, against the float baseline.

Run::

    PYTHONPATH=src python benchmarks/compile_time.py            # every model, three targets
    PYTHONPATH=src python benchmarks/compile_time.py --quick    # skip the recurrent models
    PYTHONPATH=src python benchmarks/compile_time.py --models ds_cnn --targets imxrt700
    PYTHONPATH=src python benchmarks/compile_time.py --group blocks
    PYTHONPATH=src python benchmarks/compile_time.py --group speech   # conv + 2-layer LSTM/GRU
    PYTHONPATH=src python benchmarks/compile_time.py --group mlperf --threads 1 --repeat 3 \
        --calibration-method minmax auto

For each model (the MLPerf Tiny models of ``mcu_npu.models.mlperf_tiny``; the GRU
classifiers of ``ethos_u.py`` and an LSTM classifier; the block models of
``mcu_npu.models.blocks``; conv + recurrent speech models: a conv front-end over 40
features, a 2-layer LSTM or GRU of 64 units over 100 frames, a linear head; two of them with
an op kept off the NPU, the ``fallback`` group) and target
(``imxrt700``, ``corstone-300``, ``corstone-320``),
in one fresh process per row:

* baseline: the float model's ``torch.export`` plus ``to_edge`` (no quantization, no
  delegation), the time any ExecuTorch flow spends before it starts on a backend;
* npu: seconds inside the NPU compiler's own calls (Vela's Regor compile; 0 for the
  reference compiler, which runs none);
* ours: ``mcu_npu.compile`` from the module to the ``.pte`` bytes, the accuracy check
  excluded (it runs the program on the host and is shown apart);
* calib: the part of ``ours`` spent running the calibration samples through the observed
  graph (in float64, ``quantization.driver.calibrate``): it grows with the number of samples
  the user gives, not with the compiler.

It prints ``ratio = ours / (baseline + npu)``: the time this project adds around what any
flow must spend, ``ratio-c`` the same without calibration, and lists the rows whose ratio
is 3 or more, then the ``cpu`` column (process CPU seconds of each compile) summed per group
and in all: the figure to compare two source trees by on a shared machine. Wall-clock figures
on this machine; the script asserts nothing.

``--calibration-method`` compiles each row with those methods (``compile(...,
calibration_method=m)``, ``m+bc`` adding ``bias_correction=True``; default: the compile's
own default) and, given more than one, ends
with the CPU seconds of each against the first: process CPU time, which other jobs on a
shared machine do not inflate the way they do wall time (with ``--threads 1``: threads
waiting for a busy core spin, and that counts as CPU time too); ``--repeat N`` keeps each
row's least CPU time of N compiles.

``--digests FILE`` proves two source trees compile the same programs: each row's ``.pte``
bytes are hashed (SHA-256; the ``pte`` column shows the first 12 hex digits); the first run
writes the digests to ``FILE``, a later run with the same rows compares its own against them
and lists every row whose program differs (a refactor that should change no program: none).
The default rows, 42 compiles of MLPerf Tiny, recurrent, attention and conv-recurrent speech
models on three SoC targets and the fallback group (the CPU fallback path: a second
quantization, a plan made again), are the set. Digests are of this machine's compiles: the float
calibration runs on its CPU kernels.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

TARGETS = ("imxrt700", "corstone-300", "corstone-320")
from mcu_npu.models.mlperf_tiny import MODELS as MLPERF_TINY  # noqa: E402

MLPERF = tuple(MLPERF_TINY)  # ds_cnn, mobilenet_v1_025, resnet8, fc_autoencoder
RECURRENT = ("gru64x2_t49", "bigru32_t20", "lstm32_t20")
BLOCKS = ("mobilenet_v3_style", "efficientnet_style", "transformer_encoder_style")
SPEECH = ("conv_lstm2_t100", "conv_gru2_t100")
FALLBACK = ("lstm32_t20~aten.linear", "resnet8~aten.add")
"""``model~op``: the model with ``op`` kept off the NPU (``operators_not_to_delegate``), so
the compile takes the CPU fallback path: quantized again with the Cortex-M rules, planned
again where that changed the graph."""
GROUPS = {"mlperf": MLPERF, "recurrent": RECURRENT, "blocks": BLOCKS, "speech": SPEECH,
          "fallback": FALLBACK}


def build(name: str):
    """(model, example_inputs) of a benchmark model, deterministic."""
    import torch
    from ethos_u import build_model

    from mcu_npu.models.blocks import BLOCK_MODELS

    name = name.partition("~")[0]
    if name in BLOCK_MODELS:
        model, example = BLOCK_MODELS[name]()
    elif name == "lstm32_t20":
        model, example = _lstm_classifier(16, 32, 4, 20)
    elif name in SPEECH:
        model, example = _conv_recurrent(name.split("_")[1][:-1], 40, 64, 12, 100)
    else:
        model, example = build_model(name)
    example = (example,) if isinstance(example, torch.Tensor) else tuple(example)
    return model.eval(), example


def _lstm_classifier(input_size: int, hidden: int, classes: int, steps: int, seed: int = 0):
    """A one-layer LSTM over ``steps`` frames, its last output classified by a linear layer."""
    import torch
    from torch import nn

    class LSTMClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(input_size, hidden, batch_first=True)
            self.fc = nn.Linear(hidden, classes)

        def forward(self, x):
            return self.fc(self.lstm(x)[0][:, -1])

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return LSTMClassifier().eval(), (torch.randn(1, steps, input_size),)


def _conv_recurrent(cell: str, features: int, hidden: int, classes: int, frames: int,
                    seed: int = 0):
    """A speech model: two Conv1d + BatchNorm + ReLU over ``features`` x ``frames``, a
    2-layer ``cell`` ("lstm" or "gru") over the frames, its last output classified."""
    import torch
    from torch import nn

    class ConvRecurrent(nn.Module):
        def __init__(self):
            super().__init__()
            self.front = nn.Sequential(
                nn.Conv1d(features, 64, 5, padding=2), nn.BatchNorm1d(64), nn.ReLU(),
                nn.Conv1d(64, 64, 3, padding=1), nn.BatchNorm1d(64), nn.ReLU())
            rnn = {"lstm": nn.LSTM, "gru": nn.GRU}[cell]
            self.rnn = rnn(64, hidden, num_layers=2, batch_first=True)
            self.head = nn.Linear(hidden, classes)

        def forward(self, x):  # (batch, features, frames)
            y, _ = self.rnn(self.front(x).transpose(1, 2))
            return self.head(y[:, -1])

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return ConvRecurrent().eval(), (torch.randn(1, features, frames),)


def worker(name: str, target: str, method: str | None = None) -> dict:
    import torch
    from executorch.exir import to_edge

    import mcu_npu
    import mcu_npu.flow.measure as measuring
    from mcu_npu.quantization import driver
    from _upstream_arm import capture_regor
    from ethos_u import calibration_set

    warnings.simplefilter("ignore")
    model, example = build(name)
    calibration = calibration_set(example, 16, 2024)
    t = time.perf_counter()
    to_edge(torch.export.export(model, example))
    baseline = time.perf_counter() - t

    accuracy = [0.0]
    measure = measuring.measure_accuracy

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return measure(*args, **kwargs)
        finally:
            accuracy[0] += time.perf_counter() - start

    measuring.measure_accuracy = timed
    calibration_s = [0.0]
    calibrate = driver.calibrate

    def timed_calibration(*args, **kwargs):
        start = time.perf_counter()
        try:
            return calibrate(*args, **kwargs)
        finally:
            calibration_s[0] += time.perf_counter() - start

    driver.calibrate = timed_calibration
    with capture_regor() as calls:
        t, cpu = time.perf_counter(), time.process_time()
        kwargs = method_kwargs(method)
        excluded = name.partition("~")[2]
        if excluded:
            kwargs["operators_not_to_delegate"] = [excluded]
        prog = mcu_npu.compile(model, example, target=target, calibration=calibration, **kwargs)
        total, cpu = time.perf_counter() - t, time.process_time() - cpu
    s = prog.report.summary
    return {"ok": True, "baseline_s": baseline, "npu_s": sum(sec for _, sec in calls),
            "ours_s": total - accuracy[0], "accuracy_s": accuracy[0],
            "calibration_s": calibration_s[0], "cpu_s": cpu,
            "npu_ops": f"{s['ops_on_npu']}/{s['ops_total']}", "partitions": s["partitions"],
            "pte_sha256": hashlib.sha256(prog.buffer).hexdigest(), "pte_bytes": len(prog.buffer)}


def method_kwargs(method: str | None) -> dict:
    """``compile`` keyword arguments of a ``--calibration-method`` entry: a method name, with
    ``+bc`` for ``bias_correction=True`` (e.g. ``auto+bc``)."""
    if not method:
        return {}
    name, plus, extra = method.partition("+")
    if plus and extra != "bc":
        raise SystemExit(f"unknown suffix {plus + extra!r} in {method!r}; only +bc")
    return {"calibration_method": name, **({"bias_correction": True} if plus else {})}


def run(name: str, target: str, timeout: float, method: str | None = None,
        threads: int | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, target, out,
               *([method] if method else [])]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
        if not os.path.exists(out):
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            return {"ok": False, "error": lines[-1] if lines else f"exit {proc.returncode}"}
        with open(out) as f:
            return json.load(f)


def main(argv=None) -> int:
    if argv is None and sys.argv[1:2] == ["--worker"]:
        name, target, out = sys.argv[2:5]
        try:
            result = worker(name, target, *sys.argv[5:6])
        except Exception as exc:  # noqa: BLE001 - one failed row, printed
            result = {"ok": False, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
        with open(out, "w") as f:
            json.dump(result, f)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+",
                    choices=MLPERF + RECURRENT + BLOCKS + SPEECH + FALLBACK)
    ap.add_argument("--group", nargs="+", choices=sorted(GROUPS),
                    help="only the models of these groups")
    ap.add_argument("--targets", nargs="+", default=list(TARGETS))
    ap.add_argument("--quick", action="store_true", help="skip the recurrent models")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per row")
    ap.add_argument("--calibration-method", nargs="+", default=[None], metavar="M",
                    help="compile each row with these calibration methods (the first is "
                         "the one the others' CPU time is compared with)")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="compile each row N times (methods interleaved) and keep the run "
                         "with the least CPU time")
    ap.add_argument("--digests", metavar="FILE",
                    help="write each row's .pte digest to FILE, or compare with FILE's when it "
                         "exists (two source trees, the same programs)")
    ap.add_argument("--threads", type=int, metavar="N",
                    help="torch threads per compile (OMP_NUM_THREADS; default: torch's own)")
    args = ap.parse_args(argv)
    models = args.models or [m for g in (args.group or GROUPS) for m in GROUPS[g]
                             if not (args.quick and m.partition("~")[0] in RECURRENT + SPEECH)]
    fmt = "{:<26} {:<13} {:>9} {:>7} {:>8} {:>7} {:>7} {:>8} {:>9} {:>8} {:>8} {:>9} {:>12}"
    methods = args.calibration_method
    print(fmt.format("model", "target", "baseline", "npu", "ours", "ratio", "calib",
                     "ratio-c", "accuracy", "compile", "cpu", "NPU ops", "pte")
          + ("  calibration" if methods != [None] else ""))
    over = []
    cpu: dict = {}
    digests: dict = {}
    rows = [(n, t) for n in models for t in args.targets]
    for name, target in rows:
        runs: dict = {m: [] for m in methods}
        for _ in range(max(args.repeat, 1)):  # the methods interleaved, as the load varies
            for m in methods:
                runs[m].append(run(name, target, args.timeout, m, args.threads))
        for method in methods:
            ok = [r for r in runs[method] if r.get("ok")]
            r = min(ok, key=lambda r: r["cpu_s"]) if ok else runs[method][0]
            _print_row(fmt, name, target, method, r, cpu, over)
            if r.get("ok"):
                digests[" ".join(filter(None, (name, target, method)))] = r["pte_sha256"]
    print("\nseconds, wall clock; ratio = ours / (baseline + npu); 'calib' is the part of "
          "'ours' spent running the calibration samples (in float64), 'ratio-c' the ratio "
          "without it; 'accuracy' is the host run of the .pte that compile() adds, not "
          "counted in 'ours'; 'compile' = ours + accuracy, the whole mcu_npu.compile call, and "
          "'cpu' its CPU seconds (this process and its threads: the wall time on an idle "
          "machine, whatever else runs beside it)")
    if over:
        print("ratio 3 or more: " + "; ".join(over))
    _cpu_totals(cpu, methods)
    if len(methods) > 1:
        _compare_methods(cpu, methods)
    if args.digests:
        _digests(args.digests, digests)
    return 0


def _digests(path: str, digests: dict) -> None:
    """Write ``digests`` (row -> .pte SHA-256) to ``path``, or compare with the file's."""
    if not os.path.exists(path):
        with open(path, "w") as f:
            json.dump(digests, f, indent=1, sort_keys=True)
        print(f"\n.pte digests of {len(digests)} rows written to {path}")
        return
    with open(path) as f:
        before = json.load(f)
    common = sorted(set(before) & set(digests))
    differ = [row for row in common if before[row] != digests[row]]
    print(f"\n.pte digests against {path}: {len(common) - len(differ)} of {len(common)} rows "
          "the same" + (f"; different: {', '.join(differ)}" if differ else ""))
    missing = sorted(set(before) ^ set(digests))
    if missing:
        print(f"rows in only one of the two runs: {', '.join(missing)}")


def _print_row(fmt, name, target, method, r, cpu, over) -> None:
    """One row of the table; notes its CPU time in ``cpu`` and a ratio of 3 or more in
    ``over``."""
    if not r.get("ok"):
        print(f"{name:<26} {target:<13} FAILED: {r.get('error')}")
        return
    cpu.setdefault((name, target), {})[method] = r["cpu_s"]
    ratio = r["ours_s"] / (r["baseline_s"] + r["npu_s"])
    if ratio >= 3:
        over.append(f"{name} on {target}: {ratio:.2f}")
    calib = r["calibration_s"]
    print(fmt.format(name, target, f"{r['baseline_s']:.2f}", f"{r['npu_s']:.2f}",
                     f"{r['ours_s']:.2f}", f"{ratio:.2f}", f"{calib:.2f}",
                     f"{(r['ours_s'] - calib) / (r['baseline_s'] + r['npu_s']):.2f}",
                     f"{r['accuracy_s']:.2f}", f"{r['ours_s'] + r['accuracy_s']:.1f}",
                     f"{r['cpu_s']:.1f}", r["npu_ops"], r["pte_sha256"][:12])
          + (f"  {method}" if method else ""))
    sys.stdout.flush()


def _cpu_totals(cpu: dict, methods: list) -> None:
    """The CPU seconds of the compiled rows summed per group of models and in all, per
    calibration method: two source trees compared on the same rows."""
    for method in methods:
        done = {row: seconds[method] for row, seconds in cpu.items() if method in seconds}
        groups = [f"{g} {sum(s for (n, _), s in done.items() if n in models):.1f}"
                  for g, models in GROUPS.items() if any(n in models for n, _ in done)]
        print(f"CPU seconds{f' ({method})' if method else ''}: {sum(done.values()):.1f} over "
              f"{len(done)} rows; " + ", ".join(groups))


def _compare_methods(cpu: dict, methods: list) -> None:
    """CPU seconds per row and method, each against the first method's."""
    first, others = methods[0], methods[1:]
    print(f"\ncompile CPU seconds by calibration method (vs {first})")
    print(f"{'model':<26} {'target':<13} {first:>9} " + " ".join(f"{m:>16}" for m in others))
    totals = {m: 0.0 for m in methods}
    for (name, target), row in cpu.items():
        if not all(m in row for m in methods):
            continue
        for m in methods:
            totals[m] += row[m]
        print(f"{name:<26} {target:<13} {row[first]:>9.2f} " + " ".join(
            f"{row[m]:>8.2f} ({100 * (row[m] / row[first] - 1):+5.1f}%)" for m in others))
    if totals[first]:
        print(f"{'total':<40} {totals[first]:>9.2f} " + " ".join(
            f"{totals[m]:>8.2f} ({100 * (totals[m] / totals[first] - 1):+5.1f}%)"
            for m in others))


if __name__ == "__main__":
    sys.exit(main())
