"""Benchmark: this project vs. ExecuTorch's own Arm Ethos-U flow, both through Vela.

Run::

    PYTHONPATH=src python benchmarks/ethos_u.py                # all models, both targets
    PYTHONPATH=src python benchmarks/ethos_u.py --quick        # skip the GRU models
    PYTHONPATH=src python benchmarks/ethos_u.py --no-upstream  # this project only
    PYTHONPATH=src python benchmarks/ethos_u.py --models ds_cnn resnet8 --targets ethos-u55-128

Models: the four MLPerf Tiny models (``mcu_npu.models.mlperf_tiny.MODELS``) and two GRU
classifiers, a 2-layer GRU-64 over 49 steps (+ Linear(64, 12) on the last step, input
[1, 49, 64]) and a bidirectional GRU-32 over 20 steps (+ Linear(64, 4), input [1, 20, 16]).
Targets: ``ethos-u55-128`` and ``ethos-u85-256``.

Both flows get the same model (a seeded factory: every process builds the same weights)
and the same calibration data: ``--samples`` (16) standard-normal samples of the example
inputs' shapes from ``torch.Generator().manual_seed(--seed)``.

* ours:     ``mcu_npu.compile(model, example_inputs, target=T, calibration=cal)`` (npu_compiler
            "auto", which is Vela for an Ethos-U target). Figures from ``prog.report``.
* ours, channels_last: the same with the 4-D example inputs and calibration samples in
            ``torch.channels_last`` memory format (models with an image input only). The
            Ethos-U runtime copies delegate inputs as they lie in memory, so an NCHW input
            costs a TRANSPOSE on the NPU (as upstream's flow has too) and a channels-last one
            none; the INPUT LAYOUT table sets the two side by side.
* upstream: ``executorch.backends.arm``: EthosUQuantizer(EthosUCompileSpec(T)) with
            ``get_symmetric_quantization_config(is_per_channel=True)``, prepare_pt2e,
            calibration, convert_pt2e, ``torch.export``, ``to_edge_transform_and_lower`` with
            ``EthosUPartitioner``, ``to_executorch`` (see ``_upstream_arm.py``).

The compiles are the cells of one ``mcu_npu.grid`` run, the three flows its flow axis
(``FLOWS``; their figures are the rows' ``extra``): each cell runs in a process of its own,
``--jobs`` at a time, longest first, stopped at ``--timeout``, so neither flow is warmed up
by the other, a Vela crash or a hang costs one row, and upstream's registrations never touch
ours. The clock starts after the flow's modules are imported and stops when the ``.pte``
bytes exist. Vela's figures are read on both sides from the ``PerfReport`` that Regor (Vela
5's compiler core) returns: the object the ``vela`` command prints and writes to its summary
CSV. Estimates only: see the notes printed at the end.

This script prints only; it asserts nothing, and every failure is printed and skipped.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
import warnings

import torch
from torch import nn

from mcu_npu.grid import Cell
from mcu_npu.grid.run import run_grid

TARGETS = ("ethos-u55-128", "ethos-u85-256")
from mcu_npu.models.mlperf_tiny import MODELS as MLPERF_TINY  # noqa: E402

MLPERF = tuple(MLPERF_TINY)  # ds_cnn, mobilenet_v1_025, resnet8, fc_autoencoder
GRUS = ("gru64x2_t49", "bigru32_t20")
LABELS = {"ds_cnn": "DS-CNN (KWS)", "mobilenet_v1_025": "MobileNetV1-0.25 (VWW)",
          "resnet8": "ResNet-8 (IC)", "fc_autoencoder": "FC autoencoder (AD)",
          "gru64x2_t49": "GRU-64 x2 layers, T=49", "bigru32_t20": "BiGRU-32, T=20"}

# Rough seconds of one of our compiles, to start the long jobs first (upstream: about x3).
EXPECTED_S = {"gru64x2_t49": 90, "bigru32_t20": 40, "mobilenet_v1_025": 15, "resnet8": 12,
              "ds_cnn": 10, "fc_autoencoder": 8}

# Upstream's figures quoted in the project issue (ethos-u55-128). The issue does not say
# whether the cycles are Vela's NPU or total cycles; the tables set them against both.
ISSUE_REFERENCE = {
    ("ds_cnn", "ethos-u55-128"): {"cycles": 108_804},
    ("mobilenet_v1_025", "ethos-u55-128"): {"cycles": 453_024},
    ("resnet8", "ethos-u55-128"): {"cycles": 218_655},
    ("fc_autoencoder", "ethos-u55-128"): {"cycles": 281_504},
    ("gru64x2_t49", "ethos-u55-128"): {"cycles": 2_909_328, "compile_s": 275.0},
    ("bigru32_t20", "ethos-u55-128"): {"cycles": 347_328, "compile_s": 99.0},
}


# --------------------------------------------------------------------------- models


class GRUClassifier(nn.Module):
    """A GRU over the sequence, then a Linear on the last time step's output."""

    def __init__(self, input_size: int, hidden: int, layers: int, bidirectional: bool,
                 classes: int):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden, num_layers=layers, batch_first=True,
                          bidirectional=bidirectional)
        self.fc = nn.Linear(hidden * (2 if bidirectional else 1), classes)

    def forward(self, x):
        y, _ = self.gru(x)
        return self.fc(y[:, -1])


def _gru(input_size, hidden, layers, bidirectional, classes, steps, seed=0):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = GRUClassifier(input_size, hidden, layers, bidirectional, classes).eval()
        x = torch.randn(1, steps, input_size)
    return model, (x,)


def build_model(name: str):
    """(model, example_inputs) of a benchmark model, deterministic."""
    if name == "gru64x2_t49":
        return _gru(64, 64, 2, False, 12, 49)
    if name == "bigru32_t20":
        return _gru(16, 32, 1, True, 4, 20)
    from mcu_npu.models.mlperf_tiny import MODELS

    model, example = MODELS[name]()
    example = (example,) if isinstance(example, torch.Tensor) else tuple(example)
    return model.eval(), example


def calibration_set(example_inputs: tuple, n: int, seed: int) -> list[tuple]:
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(e.shape, generator=g, dtype=e.dtype) for e in example_inputs)
            for _ in range(n)]


# --------------------------------------------------------------------------- flows


def model_factory(name: str, samples: int, seed: int, build=build_model):
    """A grid cell's model: (model, example_inputs, ``samples`` calibration samples), built
    alike in every worker (``build`` seeds the weights, ``calibration_set`` the samples)."""
    model, example = build(name)
    return model, example, calibration_set(example, samples, seed)


def _summarise_partitions(parts: list[dict]) -> dict:
    """Sums over partitions (cycles, bytes of constants and payload), the max for SRAM."""
    def total(key):
        values = [p[key] for p in parts if key in p]
        return sum(values) if values and len(values) == len(parts) else None

    def peak(key):
        values = [p[key] for p in parts if key in p]
        return max(values) if values else None

    return {"npu_cycles": total("npu_cycles"), "total_cycles": total("total_cycles"),
            "inference_time_us": total("inference_time_us"), "vela_macs": total("macs"),
            "sram_peak": peak("npu_sram_bytes"), "scratch_peak": peak("scratch_bytes"),
            "read_only": total("read_only_bytes"), "payload": total("npu_flash_bytes"),
            "encoded_weights": total("encoded_weights_bytes")}


def ours_flow(model, example_inputs, calibration, target, options) -> dict:
    """``mcu_npu.compile`` as a grid flow, timed as upstream's is (the clock starts after the
    imports), with Vela's and the host accuracy check's share; the figures in ``extra``."""
    import executorch.exir  # noqa: F401
    import mcu_npu
    import mcu_npu.flow.measure as measuring
    import mcu_npu.flow.run  # noqa: F401
    from _upstream_arm import capture_regor

    accuracy_s = [0.0]
    measure = measuring.measure_accuracy

    def timed_measure(*args, **kwargs):  # the accuracy check runs the .pte on the host
        t = time.perf_counter()
        try:
            return measure(*args, **kwargs)
        finally:
            accuracy_s[0] += time.perf_counter() - t

    measuring.measure_accuracy = timed_measure
    with capture_regor() as calls, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        prog = mcu_npu.compile(model, example_inputs, target=target, calibration=calibration,
                               **options)
        pte = prog.buffer
        compile_s = time.perf_counter() - t0
    report = prog.report
    summary = report.summary
    cpu_kinds: dict[str, int] = {}
    reasons: dict[str, str] = {}
    for o in report.ops:
        if o.kernel != "npu":
            cpu_kinds[o.op] = cpu_kinds.get(o.op, 0) + 1
            reasons.setdefault(o.op, o.reason)
    parts = [dict(p.stats) for p in report.partitions]
    return {"pte": bytes(pte), "extra": {
        "compile_s": compile_s, "accuracy_s": accuracy_s[0],
        "vela_s": sum(s for _, s in calls), "vela_runs": len(calls),
        "ops_total": summary["ops_total"], "ops_on_npu": summary["ops_on_npu"],
        "ops_on_cpu": summary["ops_on_cpu"], "macs": summary.get("macs", 0),
        "npu_macs": summary.get("npu_macs", 0), "partitions": summary["partitions"],
        "npu_compiler": summary["npu_compiler"], "cpu_op_kinds": cpu_kinds,
        "cpu_reasons": reasons, "pte_bytes": len(pte), "partition_stats": parts,
        "summary": {k: v for k, v in summary.items() if isinstance(v, (int, float, str))},
        "notes": list(report.notes)}}


def channels_last(inputs: tuple) -> tuple:
    """4-D tensors in ``torch.channels_last`` memory format, the rest as they are."""
    return tuple(x.to(memory_format=torch.channels_last) if x.dim() == 4 else x for x in inputs)


def ours_channels_last_flow(model, example_inputs, calibration, target, options) -> dict:
    """``ours_flow`` with the image inputs and calibration samples channels-last."""
    return ours_flow(model, channels_last(example_inputs),
                     [channels_last(c) for c in calibration], target, options)


FLOWS = {"ours": ours_flow, "ours_cl": ours_channels_last_flow,
         "upstream": "_upstream_arm:arm_flow"}
"""The grid's flows by the names the tables use."""


def figures(row) -> dict:
    """A row as the tables read it: its flow's figures and the partitions' sums, or its
    error."""
    if not row.ok:
        return {"ok": False, "error": row.error}
    return {"ok": True, **row.extra, **_summarise_partitions(row.extra["partition_stats"])}


# --------------------------------------------------------------------------- printing


def _fmt(v, kind="int") -> str:
    if v is None:
        return "-"
    if kind == "int":
        return f"{int(v):,}"
    if kind == "s":
        return f"{v:.1f}"
    if kind == "s2":
        return f"{v:.2f}"
    if kind == "us":
        return f"{v:,.1f}"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "ratio":
        return f"{v:.3f}"
    return str(v)


def _ratio(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


def _ops_cell(r) -> str:
    if not r.get("ok"):
        return "-"
    n, t = r["ops_on_npu"], r["ops_total"]
    return f"{n}/{t} ({100 * n / t:.1f}%)" if t else "0/0"


def _mac_cell(r) -> str:
    if not r.get("ok") or not r.get("macs"):
        return "-"
    return f"{100 * r['npu_macs'] / r['macs']:.1f}%"


ROWS = [
    # label, key, kind, ratio?
    ("compute ops on the NPU", None, "ops", False),
    ("MACs on the NPU (graph count)", None, "macs", False),
    ("MACs (conv/linear/matmul nodes of the graph)", "macs", "int", False),
    ("partitions (delegates)", "partitions", "int", False),
    ("NPU cycles (Vela npuCycles, sum)", "npu_cycles", "int", True),
    ("total cycles (Vela totalCycles, incl. memory)", "total_cycles", "int", True),
    ("inference time us (total cycles / clock)", "inference_time_us", "us", True),
    ("SRAM peak bytes (Vela 'sram' peakUsage, max)", "sram_peak", "int", True),
    ("  of which scratch/arena bytes", "scratch_peak", "int", True),
    ("flash: read-only bytes (Vela readOnlyPeak, sum)", "read_only", "int", True),
    ("flash: delegate payload bytes (bin stream, sum)", "payload", "int", True),
    (".pte bytes", "pte_bytes", "int", True),
    ("MACs counted by Vela", "vela_macs", "int", False),
    ("compile seconds (wall, in-process)", "compile_s", "s", True),
    ("  of which in Vela (Regor) s", "vela_s", "s2", False),
    ("  of which host accuracy check s", "accuracy_s", "s2", False),
]


def print_pair(name: str, target: str, ours: dict, up: dict | None):
    print(f"\n=== {LABELS.get(name, name)} [{name}] on {target} ===")
    if not ours.get("ok"):
        print(f"  ours FAILED: {ours.get('error')}")
    if up is not None and not up.get("ok"):
        print(f"  upstream FAILED: {up.get('error')}")
    ref = ISSUE_REFERENCE.get((name, target), {})
    w = 50
    head = f"  {'figure':<{w}} {'ours':>18} {'upstream':>18} {'ours/up':>8}"
    if ref:
        head += f" {'issue ref (upstream)':>22}"
    print(head)
    for label, key, kind, ratio in ROWS:
        if kind == "ops":
            a, b = _ops_cell(ours), _ops_cell(up or {})
        elif kind == "macs":
            a, b = _mac_cell(ours), _mac_cell(up or {})
        else:
            a = _fmt(ours.get(key) if ours.get("ok") else None, kind)
            b = _fmt(up.get(key) if up and up.get("ok") else None, kind)
        if key == "accuracy_s" and up is not None and up.get("ok"):
            b = "n/a"
        r = ""
        if ratio and ours.get("ok") and up and up.get("ok"):
            r = _fmt(_ratio(ours.get(key), up.get(key)), "ratio")
        line = f"  {label:<{w}} {a:>18} {b:>18} {r:>8}"
        if ref:
            extra = ""
            if key in ("npu_cycles", "total_cycles") and "cycles" in ref:
                extra = f"{ref['cycles']:,}"
                if up and up.get("ok") and up.get(key):
                    extra += f" (x{up[key] / ref['cycles']:.2f})"
            if key == "compile_s" and "compile_s" in ref:
                extra = f"{ref['compile_s']:.0f}"
                if up and up.get("ok"):
                    extra += f" (x{up['compile_s'] / ref['compile_s']:.2f})"
            line += f" {extra:>22}"
        print(line.rstrip())
    for who, r in (("ours", ours), ("upstream", up)):
        if r and r.get("ok") and r.get("cpu_op_kinds"):
            kinds = ", ".join(f"{k} x{v}" for k, v in sorted(r["cpu_op_kinds"].items()))
            print(f"  {who}: on the CPU: {kinds}")
            for op, why in (r.get("cpu_reasons") or {}).items():
                print(f"    {op}: {why}")
        if r and r.get("ok") and len(r.get("partition_stats", [])) > 1:
            for i, p in enumerate(r["partition_stats"]):
                print(f"  {who} partition {i}: npu_cycles {p.get('npu_cycles', 0):,}, "
                      f"total_cycles {p.get('total_cycles', 0):,}, sram "
                      f"{p.get('npu_sram_bytes', 0):,} B, read-only "
                      f"{p.get('read_only_bytes', 0):,} B, macs {p.get('macs', 0):,}")
    if ours.get("ok"):
        mb = [p.get("mac_bound_ratio") for p in ours.get("partition_stats", [])]
        mb = [m for m in mb if m is not None]
        extra = f", mac_bound_ratio {', '.join(str(m) for m in mb)}" if mb else ""
        print(f"  ours: npu_compiler {ours.get('npu_compiler')}, "
              f"{ours.get('vela_runs', 0)} Vela run(s){extra}")


def print_summary(results: dict, models, targets, with_upstream: bool):
    print("\n" + "=" * 100)
    print("SUMMARY (ours / upstream; < 1 means ours is smaller or faster)")
    cols = ("model", "target", "NPU ops ours", "NPU ops up", "npu cyc", "total cyc",
            "SRAM", "read-only", "payload", "compile s")
    fmt = "  {:<18} {:<14} {:>12} {:>12} {:>8} {:>9} {:>7} {:>9} {:>8} {:>9}"
    print(fmt.format(*cols))
    ratios: dict[str, dict[str, list[float]]] = {}
    for name in models:
        for t in targets:
            ours, up = results.get((name, t), (None, None))
            if ours is None:
                continue
            cells = [name, t, _ops_pct(ours), _ops_pct(up) if with_upstream else "-"]
            for key in ("npu_cycles", "total_cycles", "sram_peak", "read_only", "payload",
                        "compile_s"):
                if ours.get("ok") and up and up.get("ok"):
                    r = _ratio(ours.get(key), up.get(key))
                    cells.append(_fmt(r, "ratio"))
                    if r:
                        ratios.setdefault(t, {}).setdefault(key, []).append(r)
                else:
                    cells.append("-")
            print(fmt.format(*cells))
    if ratios:
        print("  geometric mean of the ratios over the rows where both flows compiled:")
        for t, by_key in ratios.items():
            parts = [f"{k} {math.exp(sum(map(math.log, v)) / len(v)):.3f} (n={len(v)})"
                     for k, v in by_key.items()]
            print(f"    {t}: " + ", ".join(parts))


def print_layouts(done: dict, models, targets, with_upstream: bool):
    """Total NPU cycles with an NCHW (contiguous) and a channels-last image input."""
    rows = [(n, t) for n in models for t in targets if (n, t, "ours_cl") in done]
    if not rows:
        return
    print("\nINPUT LAYOUT (Vela total cycles; NCHW input: the NPU graph transposes it, like "
          "upstream's; channels_last input: no transpose)")
    fmt = "  {:<18} {:<14} {:>12} {:>14} {:>12} {:>10} {:>10} {:>9}"
    print(fmt.format("model", "target", "ours NCHW", "ours ch-last", "upstream", "NCHW/up",
                     "cl/up", "cl/NCHW"))
    for n, t in rows:
        nchw, cl = done.get((n, t, "ours"), {}), done.get((n, t, "ours_cl"), {})
        up = done.get((n, t, "upstream"), {}) if with_upstream else {}

        def cyc(r):
            return r.get("total_cycles") if r.get("ok") else None

        print(fmt.format(n, t, _fmt(cyc(nchw)), _fmt(cyc(cl)), _fmt(cyc(up)),
                         _fmt(_ratio(cyc(nchw), cyc(up)), "ratio"),
                         _fmt(_ratio(cyc(cl), cyc(up)), "ratio"),
                         _fmt(_ratio(cyc(cl), cyc(nchw)), "ratio")))


def print_issue_reference(results: dict, with_upstream: bool):
    rows = [(k, v) for k, v in ISSUE_REFERENCE.items() if k in results]
    if not rows:
        return
    print("\nISSUE REFERENCE (upstream figures quoted in the project issue) vs. this run")
    fmt = "  {:<18} {:<14} {:>11} {:>11} {:>11} {:>11} {:>11} {:>9} {:>9}"
    print(fmt.format("model", "target", "issue cyc", "up npu cyc", "up tot cyc", "tot/issue",
                     "ours tot", "issue s", "up s"))
    for (name, t), ref in rows:
        ours, up = results[(name, t)]
        ok = bool(with_upstream and up and up.get("ok"))
        cells = [name, t, _fmt(ref.get("cycles")),
                 _fmt(up.get("npu_cycles")) if ok else "-",
                 _fmt(up.get("total_cycles")) if ok else "-",
                 _fmt(_ratio(up.get("total_cycles"), ref.get("cycles")), "ratio") if ok else "-",
                 _fmt(ours.get("total_cycles")) if ours.get("ok") else "-",
                 _fmt(ref.get("compile_s"), "s"), _fmt(up.get("compile_s"), "s") if ok else "-"]
        print(fmt.format(*cells))
    for key, label in (("total_cycles", "totalCycles"), ("npu_cycles", "npuCycles")):
        logs = [math.log(results[k][1][key] / ref["cycles"]) for k, ref in rows
                if with_upstream and results[k][1] and results[k][1].get("ok")
                and results[k][1].get(key)]
        if logs:
            print(f"  upstream {label} here / issue cycles: geometric mean "
                  f"{math.exp(sum(logs) / len(logs)):.3f} over {len(logs)} model(s)")
    print("  (the issue's models had their own weights and calibration, so only the order of "
          "magnitude and the kind of cycle count are comparable)")


def _ops_pct(r) -> str:
    if not r or not r.get("ok"):
        return "FAIL" if r else "-"
    return f"{100 * r['ops_on_npu'] / r['ops_total']:.1f}%" if r["ops_total"] else "-"


def print_matters(results: dict, models, targets, with_upstream: bool):
    print("\nFIGURES THAT MATTER")
    for name in models:
        for t in targets:
            ours, up = results.get((name, t), (None, None))
            if ours is None:
                continue
            head = f"  {name} on {t}: "
            if not ours.get("ok"):
                print(head + f"ours FAILED ({ours.get('error')})")
                continue
            parts = [f"ours {ours['ops_on_npu']}/{ours['ops_total']} ops on the NPU, "
                     f"{_fmt(ours.get('total_cycles'))} total cycles "
                     f"({_fmt(ours.get('inference_time_us'), 'us')} us), "
                     f"compile {ours['compile_s']:.1f} s"]
            if with_upstream and up and up.get("ok"):
                rc = _ratio(ours.get("total_cycles"), up.get("total_cycles"))
                rs = _ratio(ours["compile_s"], up["compile_s"])
                parts.append(f"upstream {up['ops_on_npu']}/{up['ops_total']} ops on the NPU, "
                             f"{_fmt(up.get('total_cycles'))} total cycles, compile "
                             f"{up['compile_s']:.1f} s")
                verdict = []
                if rc is not None and abs(rc - 1) < 5e-4:
                    verdict.append("same total cycles")
                elif rc is not None:
                    verdict.append(f"{(1 - rc) * 100:.1f}% fewer total cycles" if rc <= 1 else
                                   f"{(rc - 1) * 100:.1f}% MORE total cycles")
                if rs is not None:
                    verdict.append(f"compile x{1 / rs:.1f} faster" if rs <= 1 else
                                   f"compile x{rs:.1f} SLOWER")
                for key, label in (("sram_peak", "SRAM peak"), ("read_only", "read-only flash")):
                    rm = _ratio(ours.get(key), up.get(key))
                    if rm is not None and abs(rm - 1) >= 0.02:
                        verdict.append(f"{label} {(1 - rm) * 100:.0f}% smaller" if rm < 1 else
                                       f"{label} x{rm:.2f} LARGER")
                if up.get("ops_on_cpu"):
                    verdict.append(f"upstream leaves {up['ops_on_cpu']} op(s) to the CPU "
                                   f"(not in its cycles)")
                if ours.get("ops_on_cpu"):
                    verdict.append(f"ours leaves {ours['ops_on_cpu']} op(s) to the CPU "
                                   f"(not in its cycles)")
                parts.append("=> " + "; ".join(verdict))
            elif with_upstream and up is not None:
                parts.append(f"upstream FAILED ({up.get('error')})")
            print(head + "\n      ".join(parts))


NOTES = [
    "Cycles are Vela's estimates from its performance model (Regor PerfReport), not "
    "measurements; Vela's docs say not to compare them across different settings. Both "
    "flows here use the same Vela (ethos-u-vela {vela}), accelerator, system config and "
    "memory mode (U55: Ethos_U55_High_End_Embedded/Shared_Sram, U85: "
    "Ethos_U85_SYS_DRAM_Mid/Sram_Only: upstream's EthosUCompileSpec defaults, which the "
    "project's targets copy), so the comparison is like with like.",
    "'NPU cycles' = Vela npuCycles (compute only); 'total cycles' = Vela totalCycles (the "
    "bound of compute and memory access: what Vela's summary calls the inference time). "
    "Compare each with its namesake. The issue's reference numbers do not say which kind they "
    "are: both columns show the ratio upstream-measured-here / issue-reference, and the ISSUE "
    "REFERENCE table shows which kind they track.",
    "Cycles cover the NPU partitions only: ops left to the CPU (listed per row) cost extra "
    "CPU time that neither side counts; sums are over partitions.",
    "SRAM = peak of Vela's 'sram' memory, max over partitions (the arena is reused between "
    "delegate calls). In the U85 Sram_Only mode the constants live in SRAM too, so it includes "
    "the read-only data; in the U55 Shared_Sram mode constants are in off-chip flash.",
    "Flash: 'read-only' is Vela's readOnlyPeakUsage (encoded weights + scales + LUTs); "
    "'payload' is the delegate blob in the .pte (the Ethos-U runtime's vela_bin_stream: "
    "command stream + weights + I/O descriptors), summed over partitions: the on-device "
    "figure. Ours' .pte also carries the compile report and a host reference copy of each "
    "partition (named data for the host emulator), so its .pte size is not a device figure.",
    "Ops: compute call nodes (not quantize/dequantize, tuple access or constant folding), as "
    "the project's report counts them: ours from prog.report; upstream counted in the Edge "
    "graph after to_edge_transform_and_lower (inside delegates vs. left top-level). The two "
    "graphs are decomposed differently, so counts can differ for the same model; the MAC "
    "share is the sturdier measure.",
    "Compile seconds: wall clock inside a fresh process, from the first export to the .pte "
    "bytes, on this machine ({cpus} CPUs), {jobs} compile(s) at a time{threads}. Ours includes the accuracy "
    "check mcu_npu.compile always runs (the .pte executed on the host on <= 4 samples, shown "
    "separately); upstream's flow has no such step. Process start-up and imports are "
    "excluded on both sides.",
    "Upstream flow: executorch {et} backends/arm, as in its aot_arm_compiler.py / public-API "
    "test: EthosUCompileSpec(target) with no extra Vela flags; the quantizer is "
    "EthosUQuantizer(spec).set_global(get_symmetric_quantization_config(is_per_channel=True)). "
    "aot_arm_compiler's later ReplaceQuantNodesPass (CPU-side q/dq to cortex_m ops) does not "
    "touch the delegates and is not run. Vela's figures come from wrapping ethosu.regor.compile "
    "(result returned unchanged) while upstream's EthosUBackend runs the vela command in-process.",
]


def print_notes(with_upstream: bool, jobs: int = 1):
    try:
        from importlib.metadata import version
        vela_v, et_v = version("ethos-u-vela"), version("executorch")
    except Exception:
        vela_v = et_v = "?"
    print("\nNOTES")
    for n in NOTES if with_upstream else NOTES[:5]:
        print("  - " + n.format(vela=vela_v, et=et_v, cpus=os.cpu_count(), jobs=jobs,
                                threads=" (the cores shared between them: torch's and "
                                "OpenMP's threads at cores / compiles)" if jobs > 1 else ""))


# --------------------------------------------------------------------------- main


def reprint(path: str, args) -> int:
    with open(path) as f:
        saved = json.load(f)
    meta = saved.get("meta", {}) if "results" in saved else {}
    saved = saved.get("results", saved)
    results, models, targets = {}, [], []
    for key, pair in saved.items():
        name, t = key.split("|")
        models += [name] if name not in models else []
        targets += [t] if t not in targets else []
        results[(name, t)] = (pair["ours"], pair["upstream"])
    with_upstream = any(u is not None for _, u in results.values())
    jobs = meta.get("jobs", args.jobs)
    print(f"tables of {path}, compiled earlier ({meta or 'no run settings saved'})")
    for (name, t), (ours, up) in results.items():
        print_pair(name, t, ours, up)
    print_summary(results, models, targets, with_upstream)
    print_issue_reference(results, with_upstream)
    print_matters(results, models, targets, with_upstream)
    print_notes(with_upstream, jobs)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=None, choices=MLPERF + GRUS,
                    help="default: all (the GRU models unless --quick)")
    ap.add_argument("--targets", nargs="+", default=list(TARGETS))
    ap.add_argument("--quick", action="store_true", help="skip the GRU models")
    ap.add_argument("--no-upstream", action="store_true", help="this project only")
    ap.add_argument("--samples", type=int, default=16, help="calibration samples")
    ap.add_argument("--seed", type=int, default=2024, help="calibration data generator seed")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per compile")
    ap.add_argument("--jobs", type=int, default=2,
                    help="compiles run at once, sharing the cores (default 2 on 2 cores keeps "
                         "the full run near 15 min; 1 = one at a time, all threads)")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--from-json", default=None, metavar="PATH",
                    help="print the tables of a run saved with --json; compiles nothing")
    args = ap.parse_args(argv)
    models = args.models or (list(MLPERF) if args.quick else list(MLPERF + GRUS))
    if args.quick and args.models:
        models = [m for m in models if m not in GRUS]
    with_upstream = not args.no_upstream
    if args.from_json:
        return reprint(args.from_json, args)
    t_start = time.perf_counter()
    print(f"models: {', '.join(models)}\ntargets: {', '.join(args.targets)}\n"
          f"calibration: {args.samples} N(0,1) samples per model from "
          f"torch.Generator().manual_seed({args.seed}), the same for both flows and targets\n"
          f"flows: ours{' + upstream ExecuTorch Arm Ethos-U' if with_upstream else ''}; "
          f"one fresh process per compile, {args.jobs} at a time"
          f"{' (sharing the cores)' if args.jobs > 1 else ''}, timeout {args.timeout:.0f} s")
    sys.stdout.flush()
    cells = []  # (expected cost, cell)
    failed: dict = {}
    for name in models:
        try:
            _, example = build_model(name)
        except Exception as e:  # noqa: BLE001
            failed[name] = {"ok": False, "error": f"model build failed: {type(e).__name__}: {e}"}
            continue
        factory = functools.partial(model_factory, name, args.samples, args.seed)
        image = any(x.dim() == 4 for x in example)
        for t in args.targets:
            flows = ("upstream", "ours") if with_upstream else ("ours",)
            for flow in flows + (("ours_cl",) if image else ()):
                cost = EXPECTED_S.get(name, 30) * (3 if flow == "upstream" else 1)
                cells.append((cost, Cell(factory, t, flow=FLOWS[flow], flow_name=flow)))
    cells.sort(key=lambda c: -c[0])  # longest first: the slots finish together

    def show(row):
        r = figures(row)
        state = f"compile {r['compile_s']:.1f} s" if r["ok"] else \
            f"FAILED: {r['error'][:160]}"
        print(f"[{time.perf_counter() - t_start:6.0f} s] {row.flow:<8} {row.model:<17} "
              f"{row.target:<14} {state}", flush=True)

    rows = run_grid([c for _, c in cells], "ethos_u", workers=args.jobs, timeout=args.timeout,
                    progress=False, on_row=show).rows if cells else []
    done = {(r.model, r.target, r.flow): figures(r) for r in rows}
    results: dict = {}
    for name in models:
        for t in args.targets:
            if name in failed:
                ours = failed[name]
                up = ours if with_upstream else None
            else:
                ours, up = done[(name, t, "ours")], done.get((name, t, "upstream"))
            results[(name, t)] = (ours, up)
            print_pair(name, t, ours, up)
    print_summary(results, models, args.targets, with_upstream)
    print_layouts(done, models, args.targets, with_upstream)
    print_issue_reference(results, with_upstream)
    print_matters(results, models, args.targets, with_upstream)
    print_notes(with_upstream, args.jobs)
    print(f"\ntotal benchmark wall time {time.perf_counter() - t_start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            meta = {"jobs": args.jobs, "samples": args.samples, "seed": args.seed,
                    "timeout": args.timeout}
            json.dump({"meta": meta,
                       "results": {f"{n}|{t}": {"ours": o, "upstream": u}
                                   for (n, t), (o, u) in results.items()}}, f, indent=1)
        print(f"raw results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
