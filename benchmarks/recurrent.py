"""Benchmark: this project's GRU decomposition vs. upstream ExecuTorch Arm ``DecomposeGruPass``.

Run::

    PYTHONPATH=src python benchmarks/recurrent.py

For each model the module is exported with ``torch.export.export(model, args)`` and the
resulting ATen graph (``ep.module(check_guards=False)``) is rewritten by

* ours:     ``SplitGRUByLayers()`` then ``DecomposeGRU()`` (``mcu_npu.passes``);
* upstream: ``executorch.backends.arm._passes.DecomposeGruPass(tfa_pass=True)``, run on the
            same ATen graph module, inside a ``TosaLoweringContext(TOSA-1.0+FP)``: this is
            where the Arm backend itself runs it (``ArmPassManager.transform_for_annotation_pipeline``,
            called by the Arm quantizer's ``transform_for_annotation`` on the exported ATen
            graph, before quantization and before ``to_edge``).  No Edge lowering is needed.

Reported per model and decomposition: call_function op count, matmul-type op count, ops per
timestep (both plain ``total / T`` and the marginal cost of one cell step, measured as the
growth of the op count between exports at T and T/2, divided by layers * directions, which
excludes everything outside the time loop), the top op kinds, the median wall-clock time of
the pass(es) over 3 fresh exports, and the max abs difference from the torch module.

Benchmarks may import ``executorch.backends.arm``; product code never does.  This script
prints only; it asserts nothing, and an upstream failure is printed and skipped.
"""

from __future__ import annotations

import collections
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

warnings.filterwarnings("ignore")

from mcu_npu.passes import DecomposeGRU, SplitGRUByLayers  # noqa: E402

aten = torch.ops.aten
MATMUL_NAMES = {"linear", "mm", "addmm", "bmm", "matmul"}
RUNS = 3
NOTES: list[str] = []


# --------------------------------------------------------------------------- models


class GRUModel(nn.Module):
    def __init__(self, input_size: int, hidden: int, layers: int, bidirectional: bool):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden, num_layers=layers, batch_first=True, bidirectional=bidirectional)

    def forward(self, x):
        return self.gru(x)


@dataclass
class ModelSpec:
    name: str
    input_size: int
    hidden: int
    layers: int
    bidirectional: bool
    steps: int

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    def build(self) -> nn.Module:
        torch.manual_seed(0)
        return GRUModel(self.input_size, self.hidden, self.layers, self.bidirectional).eval()

    def example(self, steps: int | None = None, seed: int = 1) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return torch.randn(1, steps or self.steps, self.input_size, generator=g)


MODELS = [
    ModelSpec("KWS GRU 2x64, T=49", 64, 64, 2, False, 49),
    ModelSpec("BiGRU-32, T=20", 16, 32, 1, True, 20),
]


# --------------------------------------------------------------------------- decompositions


def run_ours(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    gm = SplitGRUByLayers()(gm).graph_module
    return DecomposeGRU()(gm).graph_module


def load_upstream() -> Callable[[torch.fx.GraphModule], torch.fx.GraphModule] | None:
    """Import upstream's DecomposeGruPass; returns a runner or None (error printed)."""
    try:
        import importlib.util

        if importlib.util.find_spec("tosa_serializer") is None:
            # executorch.backends.arm imports the TOSA flatbuffer serializer (pip
            # tosa-tools) at module level even though DecomposeGruPass never serializes.
            # Stand in an inert module (before the first import: the Arm package registers
            # torch libraries and cannot be imported twice) so the real, unmodified
            # upstream pass can run.
            from unittest import mock

            NOTES.append(
                "upstream: `tosa_serializer` (tosa-tools) is not installed; it was replaced by an "
                "inert stub module so `executorch.backends.arm` imports. DecomposeGruPass itself "
                "never touches it (it only builds aten nodes); the pass code run is unmodified."
            )
            sys.modules["tosa_serializer"] = mock.MagicMock(name="tosa_serializer_stub")
        from executorch.backends.arm._passes import DecomposeGruPass

        try:
            from executorch.backends.arm.tosa.specification import TosaLoweringContext, TosaSpecification

            spec = TosaSpecification.create_from_string("TOSA-1.0+FP")
            context = lambda: TosaLoweringContext(spec)  # noqa: E731
        except Exception as e:  # the pass does not read the spec; run without the context
            NOTES.append(f"upstream: no TosaLoweringContext ({type(e).__name__}: {e}); pass run bare")
            import contextlib

            context = contextlib.nullcontext
    except Exception as e:
        print(f"!! upstream DecomposeGruPass failed to import: {type(e).__name__}: {e}")
        traceback.print_exc(limit=3, file=sys.stdout)
        return None

    def run(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
        with context():
            result = DecomposeGruPass(tfa_pass=True)(gm)
        return result.graph_module

    return run


# --------------------------------------------------------------------------- measurement


def export_gm(model: nn.Module, x: torch.Tensor) -> torch.fx.GraphModule:
    ep = torch.export.export(model, (x,))
    return ep.module(check_guards=False)


def op_name(target) -> str:
    if hasattr(target, "_opname"):  # OpOverload / edge op
        return f"{target._opname}.{getattr(target, '_overloadname', '')}".rstrip(".")
    return getattr(target, "__name__", str(target))


def count_ops(gm: torch.fx.GraphModule) -> collections.Counter:
    return collections.Counter(op_name(n.target) for n in gm.graph.nodes if n.op == "call_function")


def matmuls(ops: collections.Counter) -> int:
    return sum(c for k, c in ops.items() if k.split(".")[0] in MATMUL_NAMES)


def max_abs_diff(got, want) -> tuple[float, ...]:
    return tuple(float((g - w).abs().max()) for g, w in zip(got, want))


@dataclass
class Result:
    model: str
    decomp: str
    ops: collections.Counter = field(default_factory=collections.Counter)
    total: int = 0
    matmul: int = 0
    per_t: float = 0.0
    cell_ops: float = 0.0  # marginal ops per cell step (one timestep of one layer/direction)
    cell_matmuls: float = 0.0
    outside_loop: float = 0.0
    time_ms: float = 0.0
    times_ms: list = field(default_factory=list)
    diff: tuple = ()
    error: str | None = None


def measure(spec: ModelSpec, decomp: str, run: Callable) -> Result:
    res = Result(spec.name, decomp)
    model = spec.build()
    x = spec.example()
    try:
        # Timing: median of RUNS, each on a fresh export (the export is not timed).
        gm = None
        for _ in range(RUNS):
            fresh = export_gm(model, x)
            t0 = time.perf_counter()
            gm = run(fresh)
            res.times_ms.append((time.perf_counter() - t0) * 1e3)
        res.time_ms = statistics.median(res.times_ms)
        res.ops = count_ops(gm)
        res.total = sum(res.ops.values())
        res.matmul = matmuls(res.ops)
        res.per_t = res.total / spec.steps
        # Marginal per-step cost: same model exported at T/2 steps.
        half = spec.steps // 2
        gm_half = run(export_gm(model, spec.example(half)))
        ops_half = count_ops(gm_half)
        cells = (spec.steps - half) * spec.layers * spec.directions
        res.cell_ops = (res.total - sum(ops_half.values())) / cells
        res.cell_matmuls = (res.matmul - matmuls(ops_half)) / cells
        res.outside_loop = res.total - res.cell_ops * spec.steps * spec.layers * spec.directions
        # Numerics on a fresh random input (not the export example).
        xr = spec.example(seed=1234)
        with torch.no_grad():
            res.diff = max_abs_diff(gm(xr), model(xr))
    except Exception as e:
        res.error = f"{type(e).__name__}: {e}"
        print(f"!! {decomp} failed on {spec.name}: {res.error}")
        traceback.print_exc(limit=4, file=sys.stdout)
    return res


# --------------------------------------------------------------------------- report


def print_model(spec: ModelSpec, results: list[Result]) -> None:
    print(f"\n## {spec.name}: nn.GRU({spec.input_size}, {spec.hidden}, num_layers={spec.layers}, "
          f"bidirectional={spec.bidirectional}, batch_first=True), input [1, {spec.steps}, {spec.input_size}]")
    print(f"   cell steps = T*layers*directions = {spec.steps}*{spec.layers}*{spec.directions} = "
          f"{spec.steps * spec.layers * spec.directions}")
    ok = [r for r in results if r.error is None]
    for r in results:
        if r.error:
            print(f"   {r.decomp:9s} ERROR {r.error}")
            continue
        print(f"   {r.decomp:9s} total={r.total:5d} matmul={r.matmul:4d} total/T={r.per_t:6.1f} "
              f"ops/cell-step={r.cell_ops:5.1f} matmul/cell-step={r.cell_matmuls:4.2f} "
              f"outside-loop={r.outside_loop:5.0f} pass={r.time_ms:8.1f} ms "
              f"(runs: {', '.join(f'{t:.1f}' for t in r.times_ms)}) "
              f"max|diff| out={r.diff[0]:.2e} h_n={r.diff[1]:.2e}")
    if not ok:
        return
    kinds = collections.Counter()
    for r in ok:
        kinds.update(r.ops)
    top = [k for k, _ in kinds.most_common(12)]
    print("\n   | op kind | " + " | ".join(r.decomp for r in ok) + " |")
    print("   | --- | " + " | ".join("---:" for _ in ok) + " |")
    for k in top:
        print(f"   | {k} | " + " | ".join(str(r.ops.get(k, 0)) for r in ok) + " |")
    rest = [sum(c for k, c in r.ops.items() if k not in top) for r in ok]
    if any(rest):
        print("   | (other) | " + " | ".join(str(v) for v in rest) + " |")


def main() -> None:
    torch.set_num_threads(min(2, torch.get_num_threads()))
    print(f"torch {torch.__version__}; passes timed as median of {RUNS} runs, each on a fresh torch.export")
    upstream = load_upstream()
    all_results: list[Result] = []
    for spec in MODELS:
        results = [measure(spec, "ours", run_ours)]
        if upstream is not None:
            results.append(measure(spec, "upstream", upstream))
        else:
            results.append(Result(spec.name, "upstream", error="import failed (see above)"))
        print_model(spec, results)
        all_results += results

    print("\n## Summary\n")
    print("| model | decomposition | ops | matmul ops | ops / T | ops / cell step | matmul / cell step "
          "| pass ms (median of 3) | max abs diff (out / h_n) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in all_results:
        if r.error:
            print(f"| {r.model} | {r.decomp} | error | | | | | | {r.error[:60]} |")
            continue
        print(f"| {r.model} | {r.decomp} | {r.total} | {r.matmul} | {r.per_t:.1f} | {r.cell_ops:.1f} "
              f"| {r.cell_matmuls:.2f} | {r.time_ms:.1f} | {r.diff[0]:.1e} / {r.diff[1]:.1e} |")
    print("\nNotes:")
    print("- ops = call_function nodes of the rewritten graph module (incl. getitem); matmul = "
          "linear/mm/addmm/bmm/matmul.")
    print("- ops / T = total / T. ops / cell step = (ops(T) - ops(T/2)) / ((T - T/2) * layers * "
          "directions): the marginal cost of one timestep of one layer and direction, i.e. "
          "(total - ops outside the time loop) / (T*layers*directions).")
    print("- ours = SplitGRUByLayers + DecomposeGRU on ep.module(check_guards=False), timed together.")
    print("- upstream = executorch.backends.arm._passes.DecomposeGruPass(tfa_pass=True)(gm) on the same "
          "ATen graph module, inside TosaLoweringContext(TOSA-1.0+FP), as ArmPassManager."
          "transform_for_annotation_pipeline runs it (pre-quantization, ATen dialect; no to_edge). "
          "It ends with an ExportPass retrace of the whole graph.")
    print("- max abs diff: rewritten graph module vs. the torch module on a fresh random input (float32).")
    for note in NOTES:
        print(f"- {note}")


if __name__ == "__main__":
    main()
