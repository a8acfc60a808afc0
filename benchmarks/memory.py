"""Benchmark: flash and RAM of the MLPerf Tiny models per target, against its memory map.

Run::

    PYTHONPATH=src python benchmarks/memory.py                          # corstone-300, imxrt700
    PYTHONPATH=src python benchmarks/memory.py --targets corstone-320 --json out.json

For each MLPerf Tiny model (``mcu_npu.models.mlperf_tiny``: DS-CNN, MobileNetV1-0.25,
ResNet-8, the autoencoder) and target it compiles once, calibrating on ``--samples`` standard
normal samples, and prints from the compile report's ``memory`` (``mcu_npu.estimate.memory``),
all in bytes:

* pte: the program's size; npu: its NPU payloads (weights + command streams); w: of which
  weights; consts: constant tensors the CPU kernels read; tables: ExecuTorch's program
  tables and the program record (the host-only data is in the companion file, not here);
* planned: ExecuTorch's planned buffers; method: the method allocator's needs (an
  estimate); scratch: the largest NPU scratch of one delegate call ("~": estimated, the
  reference payload records none); ram: what the RAM region must hold;
* the region checked tightest, its size and margin, and whether everything fits.

Figures depend on the model and the compilers, not on the machine; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

TARGETS = ["corstone-300", "imxrt700"]
MODELS = ["ds_cnn", "mobilenet_v1_025", "resnet8", "fc_autoencoder"]


def measure(name: str, target: str, samples: int, seed: int) -> dict:
    import torch

    import mcu_npu
    from mcu_npu.models import mlperf_tiny

    model, example = getattr(mlperf_tiny, name)()
    gen = torch.Generator().manual_seed(seed)
    cal = [tuple(torch.randn(x.shape, generator=gen) for x in example) for _ in range(samples)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = mcu_npu.compile(model, example, target, calibration=cal)
    m = prog.report.memory
    f, ram, s = m["flash"], m["ram"], m["summary"]
    tight = next((r for r in m["regions"] if r["name"] == s.get("tightest_region")), {})
    return {
        "model": name, "target": target, "pte": f["program"], "npu": f["npu_payloads"],
        "npu_weights": f["npu_weights"], "constants": f["constants"],
        "tables": f["tables"] + f["named_data"], "planned": ram["planned_total"],
        "method": ram["method_allocator"], "scratch": ram["npu_scratch"],
        "scratch_estimated": ram["npu_scratch_estimated"], "ram": s["ram_bytes"],
        "region": tight.get("name"), "region_size": tight.get("size"),
        "margin": tight.get("margin"), "fits": s["memory_fits"],
    }


COLUMNS = [("model", 16), ("target", 12), ("pte", 9), ("npu", 9), ("npu_weights", 9),
           ("constants", 9), ("tables", 9), ("planned", 9), ("method", 7),
           ("scratch", 9), ("ram", 9), ("region", 6), ("region_size", 10), ("margin", 10),
           ("fits", 5)]
HEADS = {"npu_weights": "w", "constants": "consts",
         "region_size": "size"}


def _cell(row, key) -> str:
    value = row.get(key)
    if key == "scratch" and row.get("scratch_estimated"):
        return f"~{value:,}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--targets", nargs="*", default=TARGETS)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    args = ap.parse_args(argv)
    print("  ".join(HEADS.get(k, k).rjust(w) for k, w in COLUMNS))
    rows = []
    for name in args.models:
        for target in args.targets:
            try:
                row = measure(name, target, args.samples, args.seed)
            except Exception as exc:  # noqa: BLE001  (a benchmark reports every failure)
                print(f"{name:>16}  {target:>12}  FAILED: {type(exc).__name__}: {exc}")
                continue
            rows.append(row)
            print("  ".join(_cell(row, k).rjust(w) for k, w in COLUMNS), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
