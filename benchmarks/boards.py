"""Benchmark: MLPerf Tiny models on the board presets (docs/boards.md).

Run::

    PYTHONPATH=src python benchmarks/boards.py
    PYTHONPATH=src python benchmarks/boards.py --models ds_cnn resnet8 --targets ra8p1 imx93

For each model (``mcu_npu.models.mlperf_tiny``) and board, one ``mcu_npu.compile`` with
``memory="auto"`` and 16 random calibration samples: the NPU compiler, the placement chosen,
the whole-model latency estimate (``report.latency``: the NPU compiler's cycles at the
preset's clock plus the Cortex-M rows), the program's flash and RAM, the tightest region of
the board's memory map with its margin, and the compile's CPU time. The latencies are
estimates (Vela's for Ethos-U boards, a MAC/bandwidth bound for the reference compiler),
not measurements on the boards. This script prints only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import time
import warnings

BOARDS = ("alif-e3-hp", "alif-e3-he", "alif-e7-hp", "alif-e7-he", "ra8p1", "psoc-edge-e84",
          "himax-we2", "mcxn947", "imx93")


def run(model_name: str, target: str) -> dict:
    import torch

    import mcu_npu
    from mcu_npu.models.mlperf_tiny import MODELS

    model, inputs = MODELS[model_name]()
    g = torch.Generator().manual_seed(0)
    calibration = [tuple(torch.randn(x.shape, generator=g) for x in inputs) for _ in range(16)]
    start = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = mcu_npu.compile(model, inputs, target=target, calibration=calibration)
    seconds = time.process_time() - start
    s, latency = prog.report.summary, prog.report.latency
    return {"model": model_name, "target": target, "compiler": s["npu_compiler"],
            "placement": prog.report.placement.get("memory", ""),
            "latency_us": latency.get("latency_us"), "npu_us": latency.get("npu_us"),
            "cpu_us": latency.get("cpu_us"), "flash": s.get("flash_bytes"),
            "ram": s.get("ram_bytes"), "tightest": s.get("tightest_region", "-"),
            "margin": s.get("tightest_margin_bytes"), "fits": s.get("memory_fits"),
            "cpu_s": seconds}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["ds_cnn"])
    parser.add_argument("--targets", nargs="+", default=list(BOARDS))
    args = parser.parse_args(argv)
    head = (f"{'model':<15} {'target':<14} {'compiler':<9} {'placement':<14} "
            f"{'latency us':>10} {'npu us':>9} {'cpu us':>8} {'flash B':>8} {'ram B':>8} "
            f"{'tightest':<9} {'margin B':>10} {'fits':<5} {'cpu s':>6}")
    print(head)
    for model_name in args.models:
        for target in args.targets:
            r = run(model_name, target)
            margin = "-" if r["margin"] is None else f"{r['margin']:,}"
            print(f"{r['model']:<15} {r['target']:<14} {r['compiler']:<9} {r['placement']:<14} "
                  f"{r['latency_us']:>10,.1f} {r['npu_us']:>9,.1f} {r['cpu_us']:>8,.1f} "
                  f"{r['flash']:>8,} {r['ram']:>8,} {r['tightest']:<9} {margin:>10} "
                  f"{str(r['fits']):<5} {r['cpu_s']:>6.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
