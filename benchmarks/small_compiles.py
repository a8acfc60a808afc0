"""Benchmark: process CPU seconds of small compiles, the kind the test suite makes by the
thousand (one to a few layers), in one process after a warm-up.

Run::

    PYTHONPATH=src python benchmarks/small_compiles.py              # 31 compiles
    PYTHONPATH=src python benchmarks/small_compiles.py --repeat 3   # least CPU of 3 each

The compiles are taken from the tests: single operators through the whole flow on
imxrt700 (``zoo/op_cases.py``, the reference NPU compiler), with int16 activations on
corstone-300 (Vela), and the Cortex-M fallback models of ``zoo/cpu_fallback.py`` on
the three targets with default placement, with everything or some ops kept off the NPU,
and activations the NPU takes whole left to the CPU. One thread, as pytest-xdist workers
run. Every case compiles once untimed first (first-use imports and caches).

Per compile it prints the least process CPU time (``time.process_time``) of ``--repeat``
compiles and a digest of what the compile gives (the ``.pte`` bytes, the companion's host
data, the report's text, summary and accuracy, the host run's outputs on the example
inputs): two source trees give the same programs when every digest is the same. Then the
mean and median of those least times, the mean over every timed compile (a least hides the
collector's full passes, which fall on some compiles only), and the CPU seconds spent in
garbage collection over the timed loop (the compiles and their digests, where a collection
a compile put off may fall), by generation. Process CPU time still varies with other jobs
on a shared machine (by a tenth or more); compare trees by alternating runs. Asserts
nothing.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import statistics
import time

os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import mcu_npu  # noqa: E402
from zoo import cpu_fallback as fallback  # noqa: E402
from zoo.checks import calibration_set  # noqa: E402
from zoo.op_cases import CASES as OPS  # noqa: E402

OP = {name: (factory, shapes) for name, factory, shapes in OPS}


def op_case(name, target, **kwargs):
    def make():
        factory, shapes = OP[name]
        torch.manual_seed(0)
        model = factory().eval()
        inputs = tuple(torch.randn(s) for s in shapes)
        return model, inputs, dict(target=target, calibration=calibration_set(inputs), **kwargs)
    return make


def fallback_case(name, target, excluded=()):
    def make():
        cls, shapes = fallback.CASES[name]
        torch.manual_seed(0)
        model = cls().eval()
        g = torch.Generator().manual_seed(1)
        inputs = tuple(torch.randn(s, generator=g) for s in shapes)
        return model, inputs, dict(target=target, calibration=calibration_set(inputs, 4, 2),
                                   operators_not_to_delegate=list(excluded))
    return make


def activation_case(act, op, target):
    def make():
        torch.manual_seed(0)
        x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1))
        return fallback.ActAfterConv(act()).eval(), (x,), dict(
            target=target, calibration=calibration_set((x,), 4, 2),
            operators_not_to_delegate=[op])
    return make


def convs_then_linear():
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                          nn.ReLU(), nn.Flatten(), nn.Linear(512, 6)).eval()
    return model, (x,), dict(target="corstone-320", calibration=calibration_set((x,), 4, 1),
                             operators_not_to_delegate=["aten.convolution"])


CASES = [
    *((f"op/{n}", op_case(n, "imxrt700", npu_compiler="reference"))
      for n in ("conv2d", "linear_relu", "add_broadcast", "softmax_last", "max_pool2d", "cat",
                "split", "mean_hw", "conv1d", "prelu")),
    *((f"int16/{n}", op_case(n, "corstone-300", precision="int16"))
      for n in ("conv2d_depthwise", "linear_relu", "sigmoid", "avg_pool2d_pad_exclude", "mm",
                "permute")),
    *((f"fallback/{n}/{t}", fallback_case(n, t))
      for n, t in (("silu", "imxrt700"), ("bmm", "corstone-300"),
                   ("regression_head", "corstone-320"), ("conv1d_unbatched", "corstone-300"),
                   ("pool_unbatched", "imxrt700"), ("in_place_sums", "corstone-320"),
                   ("where", "corstone-300"))),
    *((f"kept_off/{n}/{t}", fallback_case(n, t, x))
      for n, t, x in (("ceil_mode_pool", "imxrt700", "*"), ("regression_head", "corstone-320", "*"),
                      ("silu", "corstone-320", "*"), ("in_place_sums", "corstone-300", ("add",)),
                      ("linear_of_input", "imxrt700", "*"))),
    ("activation/hardswish/imxrt700", activation_case(nn.Hardswish, "aten.hardswish", "imxrt700")),
    ("activation/silu/corstone-300", activation_case(nn.SiLU, "aten.silu", "corstone-300")),
    ("convs_kept_off/corstone-320", convs_then_linear),
]


def digest(prog, inputs) -> str:
    h = hashlib.sha256(prog.buffer)
    for key in sorted(prog.host_data):
        h.update(key.encode())
        h.update(prog.host_data[key])
    h.update(repr(prog.report.accuracy).encode())
    h.update(repr(sorted(prog.report.summary.items())).encode())
    h.update(str(prog.report).encode())
    for out in prog.run(*inputs):
        h.update(out.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for _, make in CASES:
        model, inputs, kwargs = make()
        mcu_npu.compile(model, inputs, **kwargs)
    collected = [0.0, 0.0, 0.0]
    started = [0.0]
    timing = [False]

    def on_collect(phase, info):
        if phase == "start":
            started[0] = time.process_time()
        elif timing[0]:
            collected[info["generation"]] += time.process_time() - started[0]

    gc.callbacks.append(on_collect)
    least, digests, every = {}, {}, []
    for _ in range(args.repeat):
        for name, make in CASES:
            model, inputs, kwargs = make()
            timing[0] = True
            t = time.process_time()
            prog = mcu_npu.compile(model, inputs, **kwargs)
            cpu = time.process_time() - t
            least[name] = min(cpu, least.get(name, cpu))
            every.append(cpu)
            digests[name] = digest(prog, inputs)
    timing[0] = False
    gc.callbacks.remove(on_collect)
    for name, _ in CASES:
        print(f"{name:36s} {least[name] * 1000:8.1f} ms  {digests[name]}")
    cpu = list(least.values())
    print(f"{len(cpu)} compiles, least of {args.repeat}: mean {statistics.mean(cpu) * 1000:.1f} "
          f"ms, median {statistics.median(cpu) * 1000:.1f} ms of CPU; all {len(every)}: mean "
          f"{statistics.mean(every) * 1000:.1f} ms; garbage collection in the timed loop "
          f"(compiles and digests) {collected[0]:.2f} / {collected[1]:.2f} / "
          f"{collected[2]:.2f} s (generation 0 / 1 / 2)")


if __name__ == "__main__":
    main()
