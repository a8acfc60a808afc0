"""Benchmark: the .pte size and RAM of this project vs. ExecuTorch's own Arm Ethos-U flow.

Run::

    PYTHONPATH=src python benchmarks/pte_size.py               # 4 models x 2 targets
    PYTHONPATH=src python benchmarks/pte_size.py --set both --samples 8
    PYTHONPATH=src python benchmarks/pte_size.py --models ds_cnn \\
        --targets ethos-u85-256 --samples 4 --json out.json -j 1

Models (``--set``): ``mlperf``, the four MLPerf Tiny models of ``mcu_npu.models.mlperf_tiny``;
``independent``, the same four written as a user would (``tiny_models.py``); ``both``;
``softmax``, the six classifiers of both ending in a softmax (``name+softmax``); ``all``.
Targets ``ethos-u55-128`` and ``ethos-u85-256``. The rows are one ``mcu_npu.grid.sweep``:
models x targets x two compile flows, each cell in a process of its own (``--timeout``
seconds each, ``-j`` at a time). Both flows get the same weights and the same ``--samples``
calibration samples (``ethos_u.model_factory``) and the same Vela:

* ours:     ``mcu_npu.compile`` (the grid's own flow);
* upstream: ``executorch.backends.arm``'s flow (``_upstream_arm.arm_flow``, named to the grid).

Both ``.pte`` files are then split the same way in the worker, by parsing them (ExecuTorch's
extended header and program flatbuffer: ``pte_parts``, the rows' extra figures); all figures
are bytes:

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
prints only; it asserts nothing, and every failure is printed and skipped. ``--json``
writes the grid's rows (``Grid.to_json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from collections import Counter

import torch

import tiny_models
from ethos_u import MLPERF, TARGETS, build_model, model_factory
from mcu_npu.grid import sweep

SOFTMAX = "+softmax"
SETS = {"mlperf": tuple(MLPERF), "independent": tuple(tiny_models.MODELS)}
SETS["softmax"] = tuple(n + SOFTMAX for n in SETS["mlperf"] + SETS["independent"]
                        if "autoencoder" not in n)
SETS["both"] = SETS["mlperf"] + SETS["independent"]
SETS["all"] = SETS["both"] + SETS["softmax"]
FLOWS = {"ours": None, "upstream-arm": "_upstream_arm:arm_flow"}
"""The grid's flows: ``mcu_npu.compile`` and upstream's, named for the workers."""


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


HOST_GRAPH_PREFIX, REPORT_KEY = "mcu_npu.host_graph.", "mcu_npu.report"


# --------------------------------------------------------------------------- the split


def payload_split(blob: bytes) -> dict:
    """Sizes of a Vela bin stream's blocks and its scratch; {} for another payload."""
    from mcu_npu.npu.ethos_u.payload import blocks

    try:
        found = {name: data for name, _, data in blocks(blob)}
    except Exception:  # noqa: BLE001 - not a bin stream
        return {}
    if "cmd_data" not in found:
        return {}
    out = {"cmd_data": len(found["cmd_data"]), "weight_data": len(found.get("weight_data", b"")),
           "scratch_size": int.from_bytes(found.get("scratch_size", b"")[:4], "little")}
    out["other"] = len(blob) - out["cmd_data"] - out["weight_data"]
    return out


def pte_parts(data: bytes) -> dict:
    """Where the bytes of a .pte go (the module's docstring), as a row's extra figures; both
    flows' files go through this one function, in the worker that made them."""
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
    payloads, payload_bytes, seen = [], 0, set()
    for p in program.execution_plan:
        for d in p.delegates:
            ref, location = d.processed, int(d.processed.location)
            if (location, ref.index) in seen:
                continue
            seen.add((location, ref.index))
            if location == 0:  # inline in the flatbuffer
                blob = bytes(program.backend_delegate_data[ref.index].data)
                payload_bytes += len(blob)
            else:
                offset, size = segments[ref.index]
                blob = data[base + offset:base + offset + size]
                payload_bytes += segment(ref.index)
            payloads.append(payload_split(blob))
    if program.constant_segment and program.constant_segment.offsets:
        constants = segment(program.constant_segment.segment_index)
    else:
        constants = sum(len(b.storage) for b in program.constant_buffer)
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
    total = lambda k: sum(p.get(k, 0) for p in payloads)  # noqa: E731
    scratch = max((p.get("scratch_size", 0) for p in payloads), default=0)
    planned = sum(plan.non_const_buffer_sizes[1:])
    return {
        "payloads": payload_bytes, "consts": constants, "host": host, "named": other,
        "tables": len(data) - payload_bytes - constants - mutable - host - other,
        "RAM": planned + scratch, "cmd_data": total("cmd_data"),
        "weights": total("weight_data"), "blk+io": total("other"), "scratch": scratch,
        "planned": planned, "values": len(plan.values),
        "CPU kernels": ", ".join(f"{k.split('::')[-1]} x{v}" for k, v in kernels.items()),
        "named data": ", ".join(f"{k}: {v:,}" for k, v in named.items()),
    }


def our_vela_settings(target: str) -> str:
    from mcu_npu.npu.ethos_u.vela_run import VelaOptions
    from mcu_npu.targets import get_target

    fields = {**dataclasses.asdict(get_target(target).npu.vela),
              **dataclasses.asdict(VelaOptions())}
    return " ".join(f"{k}={v}" for k, v in fields.items())


# --------------------------------------------------------------------------- printing


def _n(v) -> str:
    return "-" if v is None else f"{v:,}"


def _x(a, b) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def pairs(rows) -> dict:
    """{(model, target): (ours' row, upstream's row)} of the grid's rows."""
    by_flow = {(r.model, r.target, r.flow): r for r in rows}
    return {(m, t): tuple(by_flow[(m, t, f)] for f in FLOWS)
            for m, t in dict.fromkeys((r.model, r.target) for r in rows)}


def print_tables(results: dict) -> None:
    head = ("model", "target", "ours", "upstream", "x", "-host x", "payloads", "consts",
            "host", "named", "tables", "RAM ours", "RAM up")
    fmt = "{:<17} {:<14}" + " {:>9}" * 2 + " {:>5}" * 2 + " {:>9}" * 7
    print("\n.pte BYTES (ours' split) AND RAM, ours vs upstream")
    print(fmt.format(*head))
    for (name, target), (o, u) in results.items():
        g = (lambda k: o.extra[k]) if o.ok else (lambda k: None)
        ours, ub = (o.pte_bytes if o.ok else None), (u.pte_bytes if u.ok else None)
        no_host = ours - g("host") if o.ok else None
        print(fmt.format(name, target, _n(ours), _n(ub), _x(ours, ub), _x(no_host, ub),
                         _n(g("payloads")), _n(g("consts")), _n(g("host")), _n(g("named")),
                         _n(g("tables")), _n(g("RAM")), _n(u.extra["RAM"] if u.ok else None)))
        for who, r in (("ours", o), ("upstream", u)):
            if not r.ok:
                print(f"  {who} FAILED: {r.error}")
    head = ("model", "target", "side", "payloads", "cmd_data", "weights", "blk+io",
            "scratch", "planned", "consts", "named", "tables", "values", "CPU kernels")
    fmt = "{:<17} {:<14} {:<4}" + " {:>8}" * 10 + "  {}"
    print("\nSPLIT OF BOTH SIDES (payload columns: sums over the delegates' bin streams)")
    print(fmt.format(*head))
    for (name, target), pair in results.items():
        for who, r in zip(("ours", "up"), pair):
            if r.ok:
                e = r.extra
                print(fmt.format(name, target, who, *(_n(e[k]) for k in (
                    "payloads", "cmd_data", "weights", "blk+io", "scratch", "planned",
                    "consts")), _n(e["host"] + e["named"]), _n(e["tables"]), _n(e["values"]),
                    e["CPU kernels"]))
    print("\nNAMED DATA (key: bytes)")
    for (name, target), pair in results.items():
        for who, r in zip(("ours", "up"), pair):
            if r.ok and r.extra["named data"]:
                print(f"  {name} {target} {who}: {r.extra['named data']}")
    print_ratios(results)
    print("\nVela settings")
    seen = set()
    for (_, target), (o, u) in results.items():
        for who, r in (("ours", o), ("upstream", u)):
            if r.ok and (who, target) not in seen:
                seen.add((who, target))
                vela = our_vela_settings(target) if who == "ours" else \
                    " ".join(r.extra["vela_flags"])
                print(f"  {target} {who}: {vela}")


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
            o, u = results[(name, t)]
            x = o.pte_bytes / u.pte_bytes if o.ok and u.ok else None
            if x is not None:
                worst[(group, t)] = max(worst.get((group, t), 0.0), x)
            cells.append("-" if x is None else f"{x:.3f}")
        print(fmt.format(name, group, *cells))
    for group in dict.fromkeys(g for g, _ in worst):
        print(fmt.format("largest", group, *(f"{worst[(group, t)]:.3f}"
                                             if (group, t) in worst else "-"
                                             for t in targets)))


# --------------------------------------------------------------------------- main


def show(row) -> None:
    """A line per finished cell."""
    print(f"{row.model} {row.target} {row.flow}: "
          + (f"{row.pte_bytes:,} B" if row.ok else "FAILED"), flush=True)


def main(argv=None) -> int:
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
    ap.add_argument("-j", "--workers", type=int, default=None,
                    help="compiles at a time (default: one per core)")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the rows here")
    args = ap.parse_args(argv)
    models = {name: functools.partial(model_factory, name, args.samples, args.seed, build)
              for name in args.models or SETS[args.set]}
    grid = sweep(models, args.targets, flows=FLOWS, extras=pte_parts, timeout=args.timeout,
                 workers=args.workers, progress=False, on_row=show)
    print_tables(pairs(grid.rows))
    if args.json:
        with open(args.json, "w") as f:
            f.write(grid.to_json())
        print(f"\nresults: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
