"""Benchmark: CPU seconds of the four GRU keyword spotter compiles the tests make, with
digests that show two trees compile the same programs.

Run::

    PYTHONPATH=src python benchmarks/kws_compiles.py                 # all four
    PYTHONPATH=src python benchmarks/kws_compiles.py auto int8       # some of them

The compiles are those of ``zoo/model_compiles.py`` and ``tests/test_auto_precision.py``
(same seeds, calibration samples and arguments), in one process with one intra-op thread
(as a pytest-xdist worker runs them):

* ``auto``: ``precision="auto"``, ``memory="flash"``, corstone-300, 16 calibration samples;
* ``int8`` / ``int16``: ``keyword_spotter("corstone-300"[, "int16-state"])``, 64 samples;
* ``rec``: ``recurrent("kws_gru2")``, imxrt700 with the reference NPU compiler.

Per compile it prints the process CPU seconds of ``compile`` (the first one pays for the
imports the others find done), and SHA-256 prefixes of the ``.pte`` bytes, of the report's
accuracy, summary and precision record, and of the host run's outputs on four inputs. It
asserts nothing.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

import hashlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

import mcu_npu  # noqa: E402
from zoo import model_compiles as mc  # noqa: E402


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _json(x) -> bytes:
    return json.dumps(x, sort_keys=True, default=repr).encode()


def _auto():
    torch.manual_seed(0)
    model = mc.KeywordSpotter().eval()
    g = torch.Generator().manual_seed(1)
    cal = [(torch.randn(1, 49, 40, generator=g),) for _ in range(16)]
    prog = mcu_npu.compile(model, cal[0], target="corstone-300", calibration=cal,
                           precision="auto", memory="flash")
    return prog, [c[0] for c in cal[:4]]


def _kws(precision: str):
    def compile_it():
        _, prog, tests = mc.keyword_spotter.__wrapped__("corstone-300", precision)
        return prog, tests[:4]
    return compile_it


def _recurrent():
    _, prog, tests = mc.recurrent.__wrapped__("kws_gru2")
    return prog, tests[:4]


CASES = {"auto": _auto, "int8": _kws("int8"), "int16": _kws("int16-state"), "rec": _recurrent}


def main(names: list[str]) -> None:
    torch.set_num_threads(1)
    for name in names or list(CASES):
        start = time.process_time()
        prog, inputs = CASES[name]()
        cpu = time.process_time() - start
        outputs = hashlib.sha256()
        for x in inputs:
            for out in prog.run(x):
                outputs.update(out.contiguous().numpy().tobytes())
        report = prog.report
        print(f"{name:6s} cpu {cpu:6.2f} s  pte {_digest(prog.buffer)} ({len(prog.buffer)} B)  "
              f"accuracy {_digest(_json(report.accuracy))}  "
              f"summary {_digest(_json(report.summary))}  "
              f"precision {_digest(_json(report.precision))}  "
              f"run {outputs.hexdigest()[:16]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
