"""Attention however it is spelled: compile each spelling of ``zoo/attention_spellings.py``
(seq 8, width 16, 2 heads, random weights, 8 calibration samples) and print, per spelling and
target, ops on the NPU / ops total, partitions, whether softmax and both matmuls run on the
NPU, host and reference SQNR against float (all outputs of 8 held-out inputs), and the ops left
on the CPU.

Run::

    PYTHONPATH=src python benchmarks/attention.py
    PYTHONPATH=src python benchmarks/attention.py --targets corstone-320 --spellings sdpa

This script prints only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings

TARGETS = ("corstone-300", "corstone-320", "imxrt700")
ATTENTION_OPS = ("_softmax", "bmm")  # Edge names: "aten._softmax", "aten.bmm"


def measure(name: str, target: str) -> dict:
    """Compile spelling ``name`` for ``target`` and measure it; never raises."""
    import torch

    import mcu_npu
    from mcu_npu.estimate.metrics import sqnr_db
    from zoo.attention_spellings import spelling
    from zoo.checks import calibration_set

    model, example = spelling(name)
    calibration = calibration_set(example, n=8, seed=1)
    held_out = calibration_set(example, n=8, seed=2)
    row = {"spelling": name, "target": target}
    t0 = time.time()
    try:
        prog = mcu_npu.compile(model, example, target=target, calibration=calibration)
    except Exception as exc:  # noqa: BLE001
        return {**row, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}
    s = prog.report.summary
    with torch.no_grad():
        want = torch.cat([model(*x).flatten() for x in held_out])
        host = torch.cat([prog.run(*x)[0].flatten() for x in held_out])
        ref = torch.cat([prog.reference(*x).flatten() for x in held_out])
    attention = [o for o in prog.report.ops if o.op.split(".")[1] in ATTENTION_OPS]
    return {**row, "npu": s["ops_on_npu"], "total": s["ops_total"],
            "partitions": s["partitions"],
            "attention_on_npu": all(o.placement.startswith("NPU") for o in attention)
            and len(attention) >= 3,
            "host_db": sqnr_db(want, host), "ref_db": sqnr_db(want, ref),
            "cpu": sorted({o.op for o in prog.report.ops if not o.placement.startswith("NPU")}),
            "seconds": time.time() - t0}


def main(argv=None) -> None:
    from zoo.attention_spellings import FACTORIES

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", nargs="+", default=list(TARGETS))
    p.add_argument("--spellings", nargs="+", default=list(FACTORIES))
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    print(f"{'spelling':28} {'target':13} {'NPU/ops':>8} {'parts':>5} {'attn':>5} "
          f"{'host dB':>8} {'ref dB':>7} {'s':>5}  CPU ops")
    for target in args.targets:
        for name in args.spellings:
            r = measure(name, target)
            if "error" in r:
                print(f"{name:28} {target:13} {r['error']}", flush=True)
                continue
            print(f"{name:28} {target:13} {r['npu']:>3}/{r['total']:<4} {r['partitions']:>5} "
                  f"{'yes' if r['attention_on_npu'] else 'no':>5} {r['host_db']:8.1f} "
                  f"{r['ref_db']:7.1f} {r['seconds']:5.1f}  {' '.join(r['cpu'])}", flush=True)


if __name__ == "__main__":
    main()
