"""Benchmark: wall time of the quick ``mcu-npu`` subcommands, each in a fresh process.

Run::

    PYTHONPATH=src python benchmarks/cli_startup.py                 # compiles digits first
    PYTHONPATH=src python benchmarks/cli_startup.py --pte m.pte     # an existing program
    PYTHONPATH=src python benchmarks/cli_startup.py --repeat 5

Times ``mcu-npu report m.pte``, ``mcu-npu check m.pte --target imxrt700``,
``mcu-npu targets`` and ``mcu-npu --version`` (run as ``python -m mcu_npu.cli``, so the
``mcu_npu`` on ``PYTHONPATH`` is the one measured): the best and the median wall time of
``--repeat`` runs, the median CPU time (user + system: what the machine's load does not
inflate), and whether each process imported torch. Without ``--pte`` it first compiles
``examples/digits.py:calibrated`` for imxrt700 into a temporary folder (not timed).
Wall-clock figures on this machine; the script asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "mcu_npu.cli"]


def _pte(folder: str) -> str:
    out = os.path.join(folder, "digits.pte")
    subprocess.run([*CLI, "compile", str(ROOT / "examples" / "digits.py:calibrated"),
                    "--target", "imxrt700", "-o", out], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


def _time(argv: list[str], repeat: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds of the process: user + system) of each of ``repeat`` runs."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def _imports_torch(argv: list[str]) -> bool:
    """Whether the subcommand's process imported torch (``-X importtime`` lists it)."""
    run = subprocess.run([sys.executable, "-X", "importtime", *argv[1:]],
                         capture_output=True, text=True)
    return any(line.split("|")[-1].strip() == "torch" for line in run.stderr.splitlines())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pte", help="a compiled .pte (default: compile digits first)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pte = args.pte or _pte(tmp)
        commands = {
            "report m.pte": ["report", pte],
            "check m.pte --target imxrt700": ["check", pte, "--target", "imxrt700"],
            "targets": ["targets"],
            "--version": ["--version"],
        }
        print(f"{'command':38s} {'wall best':>9s} {'wall median':>11s} {'CPU median':>10s}"
              f"  imports torch")
        for name, argv in commands.items():
            walls, cpus = _time([*CLI, *argv], args.repeat)
            print(f"{'mcu-npu ' + name:38s} {min(walls):9.2f} {statistics.median(walls):11.2f}"
                  f" {statistics.median(cpus):10.2f}"
                  f"  {'yes' if _imports_torch([*CLI, *argv]) else 'no'}")


if __name__ == "__main__":
    main()
