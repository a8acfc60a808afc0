"""Benchmark: the .pte size and RAM of this project vs. ExecuTorch's own Arm Ethos-U flow.

Run::

    PYTHONPATH=src python benchmarks/pte_size.py               # 4 models x 2 targets
    PYTHONPATH=src python benchmarks/pte_size.py --set both --samples 8
    PYTHONPATH=src python benchmarks/pte_size.py --models ds_cnn \\
        --targets ethos-u85-256 --samples 4 --json out.json

Models (``--set``): ``mlperf``, the four MLPerf Tiny models of ``mcu_npu.models.mlperf_tiny``;
``independent``, the same four written as a user would (``tiny_models.py``); ``both``;
``softmax``, the six classifiers of both ending in a softmax (``name+softmax``); ``all``.
Targets ``ethos-u55-128`` and ``ethos-u85-256``. Both flows get the same weights and the same
``--samples`` calibration samples, the same Vela, and run each compile in a fresh process,
one at a time (as ``ethos_u.py``, whose helpers this reuses):

* ours:     ``mcu_npu.compile(model, example_inputs, target=T, calibration=cal).buffer``;
* upstream: ``executorch.backends.arm``'s flow (``_upstream_arm.compile_upstream``).

Both ``.pte`` files are then split the same way, by parsing them (ExecuTorch's extended
header and program flatbuffer); all figures are bytes:

* ours / upstream: the whole ``.pte``, what the device is given (ours is ``prog.buffer``;
  what only the host reads is in the companion ``.ptd``, not counted); x: ours / upstream;
  -host x: the same without any host-only named data (equal to x since the companion file);
* payloads: the delegates' processed blobs (Vela bin streams), each counted once;
* consts: the constant segment (or inline constant buffers) the CPU kernels read;
* host: named data the device never reads, keys ``mcu_npu.host_graph.*`` (each partition's
  graph for the host emulator) and ``mcu_npu.report``; named: the other named data;
* tables: the rest: program flatbuffer (values, instructions, operators, plans), headers
  and the padding between segments;
* RAM: ExecuTorch's planned buffers (``non_const_buffer_sizes[1:]`` of "forward") plus the
  largest NPU scratch (``scratch_size`` of a delegate's bin stream), ours / upstream.

A second table splits each side's payloads into Vela's ``cmd_data``, ``weight_data`` and the
rest (block headers, I/O descriptors, padding), with the scratch, the planned buffers, the
same split of upstream's file, the values of the method and the CPU kernels it calls. Then
the named data of each file by key, each side's Vela settings, and the ratio ours / upstream
per model and target with the largest per set (above 1.00: ours is the larger). This script
prints only; it asserts nothing, and every failure is printed and skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections import Counter

import torch

import tiny_models
from ethos_u import MLPERF, TARGETS, build_model, calibration_set

SOFTMAX = "+softmax"
SETS = {"mlperf": tuple(MLPERF), "independent": tuple(tiny_models.MODELS)}
SETS["softmax"] = tuple(n + SOFTMAX for n in SETS["mlperf"] + SETS["independent"]
                        if "autoencoder" not in n)
SETS["both"] = SETS["mlperf"] + SETS["independent"]
SETS["all"] = SETS["both"] + SETS["softmax"]


class WithSoftmax(torch.nn.Module):
    """A classifier ending in ``softmax`` over its classes, as MLPerf Tiny's references do."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *x):
        return torch.softmax(self.model(*x), dim=-1)


def build(name: str):
    """(model, example_inputs) of a model of any set (``name+softmax``: with a final
    softmax)."""
    if name.endswith(SOFTMAX):
        model, example = build(name.removesuffix(SOFTMAX))
        return WithSoftmax(model).eval(), example
    if name in tiny_models.MODELS:
        return tiny_models.MODELS[name]()
    return build_model(name)


def _load_job(path: str):
    job = torch.load(path, weights_only=False)
    model, _ = build(job["model"])
    model.load_state_dict(job["state_dict"], strict=True)
    return model.eval(), job["example_inputs"], job["calibration"]

HOST_GRAPH_PREFIX, REPORT_KEY = "mcu_npu.host_graph.", "mcu_npu.report"


# --------------------------------------------------------------------------- the split


def payload_split(blob: bytes) -> dict:
    """Sizes of a Vela bin stream's blocks and its scratch; {} for another payload."""
    from mcu_npu.npu.ethos_u.payload import blocks

    try:
        found = {name: (external, data) for name, external, data in blocks(blob)}
    except Exception:  # noqa: BLE001 - not a bin stream
        return {}
    if "cmd_data" not in found:
        return {}
    out = {"bytes": len(blob), "cmd_data": len(found["cmd_data"][1]),
           "weight_data": len(found.get("weight_data", (0, b""))[1]),
           "scratch_size": int.from_bytes(found.get("scratch_size", (0, b""))[1][:4], "little"),
           "external_blocks": [n for n, (ext, _) in found.items() if ext]}
    out["other"] = out["bytes"] - out["cmd_data"] - out["weight_data"]
    return out


def pte_split(data: bytes) -> dict:
    """Where the bytes of a .pte go; both flows' files go through this one function."""
    from executorch.exir._serialize._program import _flatbuffer_to_program, _get_extended_header

    eh = _get_extended_header(data)
    valid = eh is not None and eh.is_valid()
    program_size = eh.program_size if valid else len(data)
    base = eh.segment_base_offset if valid else 0
    program = _flatbuffer_to_program(data[:program_size])
    segments = [(s.offset, s.size) for s in program.segments]
    counted: set = set()  # segments counted once, whoever refers to them

    def segment(i: int) -> int:
        if i in counted:
            return 0
        counted.add(i)
        return segments[i][1]

    plan = next((p for p in program.execution_plan if p.name == "forward"),
                program.execution_plan[0])
    payloads, payload_bytes, inline_bytes, seen = [], 0, 0, set()
    for p in program.execution_plan:
        for d in p.delegates:
            ref, location = d.processed, int(d.processed.location)
            if (location, ref.index) in seen:
                continue
            seen.add((location, ref.index))
            if location == 0:  # inline in the flatbuffer
                blob = bytes(program.backend_delegate_data[ref.index].data)
                inline_bytes += len(blob)
                payload_bytes += len(blob)
            else:
                offset, size = segments[ref.index]
                blob = data[base + offset:base + offset + size]
                payload_bytes += segment(ref.index)
            payloads.append({"backend": d.id, "location": "inline" if location == 0 else
                             "segment", **payload_split(blob)})
    if program.constant_segment and program.constant_segment.offsets:
        constants = segment(program.constant_segment.segment_index)
    else:
        constants = sum(len(b.storage) for b in program.constant_buffer)
        inline_bytes += constants
    mutable = sum(segment(m.segment_index) for m in program.mutable_data_segments or [])
    named: dict[str, int] = {}
    host = other = 0
    for entry in program.named_data or []:
        size = segment(entry.segment_index)
        named[entry.key] = segments[entry.segment_index][1]
        if entry.key.startswith(HOST_GRAPH_PREFIX) or entry.key == REPORT_KEY:
            host += size
        else:
            other += size
    kernels = Counter()
    for chain in plan.chains:
        for ins in chain.instructions:
            op_index = getattr(ins.instr_args, "op_index", None)
            if op_index is not None:
                op = plan.operators[op_index]
                kernels[f"{op.name}.{op.overload}" if op.overload else op.name] += 1
    scratch = max((p.get("scratch_size", 0) for p in payloads), default=0)
    planned = sum(plan.non_const_buffer_sizes[1:])
    return {
        "bytes": len(data), "payloads": payload_bytes, "constants": constants,
        "mutable": mutable, "named_host_only": host, "named_other": other,
        "tables": len(data) - payload_bytes - constants - mutable - host - other,
        "flatbuffer": program_size - inline_bytes,
        "padding": len(data) - program_size - sum(s for _, s in segments),
        "named_data": named, "payload_list": payloads,
        "ram": {"planned": planned, "npu_scratch": scratch, "total": planned + scratch},
        "values": len(plan.values), "instructions": sum(kernels.values()),
        "kernels": dict(kernels), "delegates": len(plan.delegates),
    }


# --------------------------------------------------------------------------- workers


def our_vela_settings(target: str) -> str:
    from mcu_npu.npu.ethos_u.vela_run import VelaOptions
    from mcu_npu.targets import get_target

    fields = {**dataclasses.asdict(get_target(target).npu.vela),
              **dataclasses.asdict(VelaOptions())}
    return " ".join(f"{k}={v}" for k, v in fields.items())


def worker_main(flow: str, job: str, target: str, out: str) -> int:
    """Compile one model in this fresh process: the .pte to ``out``, facts to out.json."""
    meta: dict = {"ok": True}
    try:
        model, example_inputs, calibration = _load_job(job)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if flow == "ours":
                import mcu_npu

                prog = mcu_npu.compile(model, example_inputs, target=target,
                                       calibration=calibration)
                pte = bytes(prog.buffer)
                meta["vela"] = our_vela_settings(target)
            else:
                from _upstream_arm import compile_upstream

                r = compile_upstream(model, example_inputs, calibration, target, keep_pte=True)
                pte = r.pop("pte")
                meta["vela"] = " ".join(r["vela_flags"])
        with open(out, "wb") as f:
            f.write(pte)
    except BaseException as e:  # noqa: BLE001 - every failure becomes a printed row
        meta = {"ok": False, "error": f"{type(e).__name__}: {' '.join(str(e).split())[:400]}",
                "traceback": traceback.format_exc()[-3000:]}
    with open(out + ".json", "w") as f:
        json.dump(meta, f)
    return 0


def run_worker(flow: str, job: str, target: str, workdir: str, timeout: float) -> dict:
    stem = os.path.basename(job).removesuffix(".pt")
    out = os.path.join(workdir, f"{flow}_{stem}_{target}.pte")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", flow, job, target, out]
    try:
        proc = subprocess.run(cmd, env=env, timeout=timeout, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True)
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    if not os.path.exists(out + ".json"):
        return {"ok": False, "error": f"worker exited with {proc.returncode}: {tail[0][:300]}"}
    with open(out + ".json") as f:
        result = json.load(f)
    if result.get("ok"):
        try:
            with open(out, "rb") as f:
                result.update(pte_split(f.read()))
        except Exception as e:  # noqa: BLE001
            result = {"ok": False, "error": f"cannot split the .pte: {type(e).__name__}: {e}"}
    return result


# --------------------------------------------------------------------------- printing


def _n(v) -> str:
    return "-" if v is None else f"{v:,}"


def _x(a, b) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def print_tables(results: dict) -> None:
    head = ("model", "target", "ours", "upstream", "x", "-host x", "payloads", "consts",
            "host", "named", "tables", "RAM ours", "RAM up")
    fmt = "{:<17} {:<14}" + " {:>9}" * 2 + " {:>5}" * 2 + " {:>9}" * 7
    print("\n.pte BYTES (ours' split) AND RAM, ours vs upstream")
    print(fmt.format(*head))
    for (name, target), (o, u) in results.items():
        ok_o, ok_u = o.get("ok"), u.get("ok")
        g = (lambda k: o.get(k)) if ok_o else (lambda k: None)
        ub = u.get("bytes") if ok_u else None
        no_host = g("bytes") - g("named_host_only") if ok_o else None
        print(fmt.format(name, target, _n(g("bytes")), _n(ub), _x(g("bytes"), ub),
                         _x(no_host, ub), _n(g("payloads")), _n(g("constants")),
                         _n(g("named_host_only")), _n(g("named_other")), _n(g("tables")),
                         _n(o["ram"]["total"] if ok_o else None),
                         _n(u["ram"]["total"] if ok_u else None)))
        for who, r in (("ours", o), ("upstream", u)):
            if not r.get("ok"):
                print(f"  {who} FAILED: {r.get('error')}")
    head = ("model", "target", "side", "payloads", "cmd_data", "weights", "blk+io",
            "scratch", "planned", "consts", "named", "tables", "values", "CPU kernels")
    fmt = "{:<17} {:<14} {:<4}" + " {:>8}" * 10 + "  {}"
    print("\nSPLIT OF BOTH SIDES (payload columns: sums over the delegates' bin streams)")
    print(fmt.format(*head))
    for (name, target), pair in results.items():
        for who, r in zip(("ours", "up"), pair):
            if not r.get("ok"):
                continue
            ps = r["payload_list"]
            total = lambda k: sum(p.get(k, 0) for p in ps)  # noqa: E731
            kernels = ", ".join(f"{k.split('::')[-1]} x{v}" for k, v in r["kernels"].items())
            print(fmt.format(name, target, who, _n(r["payloads"]), _n(total("cmd_data")),
                             _n(total("weight_data")), _n(total("other")),
                             _n(r["ram"]["npu_scratch"]), _n(r["ram"]["planned"]),
                             _n(r["constants"]), _n(r["named_host_only"] + r["named_other"]),
                             _n(r["tables"]), _n(r["values"]), kernels))
    print("\nNAMED DATA (key: bytes)")
    for (name, target), pair in results.items():
        for who, r in zip(("ours", "up"), pair):
            if r.get("ok") and r["named_data"]:
                print(f"  {name} {target} {who}: " + ", ".join(
                    f"{k}: {v:,}" for k, v in r["named_data"].items()))
    print_ratios(results)
    print("\nVela settings")
    seen = set()
    for (_, target), pair in results.items():
        for who, r in zip(("ours", "upstream"), pair):
            if r.get("ok") and (who, target) not in seen:
                seen.add((who, target))
                print(f"  {target} {who}: {r['vela']}")


def print_ratios(results: dict) -> None:
    """ours / upstream .pte bytes, one row per model, one column per target; the set's
    largest ratio last."""
    targets = list(dict.fromkeys(t for _, t in results))
    fmt = "{:<17} {:<12}" + " {:>14}" * len(targets)
    print("\nRATIO ours / upstream (.pte bytes)")
    print(fmt.format("model", "set", *targets))
    worst: dict = {}
    for name in dict.fromkeys(n for n, _ in results):
        group = next(k for k, v in SETS.items() if k not in ("both", "all") and name in v)
        cells = []
        for t in targets:
            o, u = results.get((name, t), ({}, {}))
            x = o["bytes"] / u["bytes"] if o.get("ok") and u.get("ok") else None
            if x is not None:
                worst[(group, t)] = max(worst.get((group, t), 0.0), x)
            cells.append("-" if x is None else f"{x:.3f}")
        print(fmt.format(name, group, *cells))
    for group in dict.fromkeys(g for g, _ in worst):
        print(fmt.format("largest", group, *(f"{worst[(group, t)]:.3f}"
                                             if (group, t) in worst else "-"
                                             for t in targets)))


# --------------------------------------------------------------------------- main


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker_main(*argv[1:5])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", default="mlperf", choices=sorted(SETS),
                    help="model set: mlperf (mcu_npu.models), independent (tiny_models.py), both, "
                         "softmax (the classifiers + a final softmax), all")
    ap.add_argument("--models", nargs="+", default=None, choices=SETS["all"],
                    help="models to compile (default: the whole --set)")
    ap.add_argument("--targets", nargs="+", default=list(TARGETS))
    ap.add_argument("--samples", type=int, default=16, help="calibration samples")
    ap.add_argument("--seed", type=int, default=2024, help="calibration data generator seed")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per compile")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the results here")
    args = ap.parse_args(argv)
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="pte_size_") as workdir:
        for name in args.models or SETS[args.set]:
            try:
                model, example = build(name)
                job = os.path.join(workdir, f"{name}.pt")
                torch.save({"model": name, "state_dict": model.state_dict(),
                            "example_inputs": example,
                            "calibration": calibration_set(example, args.samples, args.seed)},
                           job)
            except Exception as e:  # noqa: BLE001
                failed = {"ok": False, "error": f"model build failed: {type(e).__name__}: {e}"}
                results.update({(name, t): (failed, failed) for t in args.targets})
                continue
            for t in args.targets:
                pair = tuple(run_worker(flow, job, t, workdir, args.timeout)
                             for flow in ("ours", "upstream"))
                results[(name, t)] = pair
                print(f"{name} {t}: " + ", ".join(
                    f"{who} {_n(r['bytes'])} B" if r.get("ok") else f"{who} FAILED"
                    for who, r in zip(("ours", "upstream"), pair)), flush=True)
    print_tables(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{n}|{t}": {"ours": o, "upstream": u}
                       for (n, t), (o, u) in results.items()}, f, indent=1)
        print(f"\nresults: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
