"""Benchmark: how much of each model the NPU runs, per target.

Run::

    PYTHONPATH=src python benchmarks/placement.py                     # block + MLPerf models
    PYTHONPATH=src python benchmarks/placement.py --models transformer_encoder_style
    PYTHONPATH=src python benchmarks/placement.py --targets corstone-320 --json out.json

For each model (the block models of ``mcu_npu.models.blocks``: MobileNetV3-, EfficientNet-
and TransformerEncoder-style; the MLPerf Tiny models; the biosignal and speech shapes of
``mcu_npu.models.signal``) and target (``imxrt700``,
``corstone-300``, ``corstone-320``) it compiles once, calibrating on ``--samples`` standard
normal samples, and prints from the compile report:

* npu ops: compute ops on the NPU / all compute ops, and the fraction;
* npu MACs: the fraction of the multiply-accumulates the NPU runs;
* partitions: the number of NPU partitions (each is a delegate call and a CPU round trip);
* cortex-m / portable: compute ops on Cortex-M int8 kernels / on portable kernels;
* SQNR of the host-run program and of the quantized reference against float (dB).

Figures depend on the model, not on the machine; the script asserts nothing and prints
every failure as a row.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

TARGETS = ["imxrt700", "corstone-300", "corstone-320"]


def models() -> dict:
    from mcu_npu.models import BLOCK_MODELS, MODELS, SIGNAL_MODELS

    return {**BLOCK_MODELS, **MODELS, **SIGNAL_MODELS}


def measure(name: str, target: str, samples: int, seed: int) -> dict:
    import torch

    import mcu_npu
    from mcu_npu.report import Kernel

    model, example = models()[name]()
    gen = torch.Generator().manual_seed(seed)
    cal = [tuple(torch.randn(x.shape, generator=gen) for x in example) for _ in range(samples)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = mcu_npu.compile(model, example, target, calibration=cal)
    s = prog.report.summary
    return {
        "model": name, "target": target,
        "npu_ops": s["ops_on_npu"], "ops": s["ops_total"],
        "npu_fraction": s["npu_ops_fraction"],
        "npu_macs_fraction": round(s["npu_macs"] / s["macs"], 4) if s["macs"] else 0.0,
        "partitions": s["partitions"],
        "cortex_m": s["ops_on_cortex_m"],
        "portable": sum(o.kernel is Kernel.PORTABLE for o in prog.report.ops),
        "sqnr_db": s.get("sqnr_db"), "reference_sqnr_db": s.get("reference_sqnr_db"),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--targets", nargs="*", default=TARGETS)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    args = ap.parse_args(argv)
    names = args.models or list(models())
    rows = []
    head = f"{'model':28s} {'target':13s} {'npu ops':>11s} {'frac':>6s} {'MACs':>6s} " \
           f"{'parts':>5s} {'c-m':>4s} {'port':>4s} {'sqnr':>7s} {'ref':>7s}"
    print(head)
    print("-" * len(head))
    for name in names:
        for target in args.targets:
            try:
                r = measure(name, target, args.samples, args.seed)
            except Exception as exc:  # noqa: BLE001  (a row per failure; nothing asserted)
                print(f"{name:28s} {target:13s} FAILED {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:120]}")
                continue
            rows.append(r)
            print(f"{name:28s} {target:13s} {r['npu_ops']:>5d}/{r['ops']:<5d} "
                  f"{100 * r['npu_fraction']:5.1f}% {100 * r['npu_macs_fraction']:5.1f}% "
                  f"{r['partitions']:>5d} {r['cortex_m']:>4d} {r['portable']:>4d} "
                  f"{r['sqnr_db']:7.2f} {r['reference_sqnr_db']:7.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
