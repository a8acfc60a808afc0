"""Auto's whole-model check. Each per-tensor choice lowers its own tensor's quantization
error, yet together they can cost accuracy: a clipped tensor's error passes through every
layer after it, and what a range buys on one tensor says nothing of how the next layers
amplify its clipping. So after calibration both quantized references are built, the one
with auto's per-tensor ranges and the one with MinMax's everywhere, and both run the
calibration samples exactly (``quantization.exact``, float64: the same verdict on every
host). Auto's ranges are kept only when their output SQNR against the float outputs is
higher by ``MIN_GAIN_DB``; otherwise every tensor auto set falls back to MinMax. The
verdict goes in the reference's ``meta[CHECK_KEY]`` for the report."""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch
from torch.fx import GraphModule

from ..exact import run_exact
from .observer import CalibrationObserver

MIN_GAIN_DB = 0.2
"""How much higher (dB) the whole-model SQNR with auto's per-tensor ranges must be than with
MinMax everywhere for auto's ranges to be kept. The samples are the ones the ranges were
chosen on, which favours the clipped ranges a little."""

MAX_SAMPLES = 32
"""Calibration samples the check runs (the first ones): whole-model numerics over every
output of that many inputs."""

CHECK_KEY = "mcu_npu_calibration_check"
"""Key in the quantized reference's ``meta``: ``{"kept", "auto_sqnr_db", "minmax_sqnr_db",
"samples"}``."""


def auto_observers(prepared: GraphModule) -> list[CalibrationObserver]:
    """The observers of ``prepared`` whose range auto chose other than MinMax's."""
    return [m for m in prepared.modules() if isinstance(m, CalibrationObserver)
            and m.method == "auto" and m.record and m.record["method"] != "minmax"]


def convert_checked(prepared: GraphModule, samples: list[tuple], float_outputs: list,
                    convert: Callable[[GraphModule], tuple[GraphModule, dict]]):
    """``convert(prepared)`` (a (reference, records) pair), with auto's per-tensor ranges
    or, where they do not raise the whole-model SQNR on ``samples`` (whose float outputs
    are ``float_outputs``), MinMax's. Returns (reference, records, verdict or None)."""
    if not auto_observers(prepared) or not float_outputs:
        return (*convert(prepared), None)
    fallback = copy.deepcopy(prepared)
    for observer in auto_observers(fallback):
        observer.pin_to_min_max()
    n = min(len(samples), len(float_outputs), MAX_SAMPLES)
    candidates = {"auto": convert(prepared), "minmax": convert(fallback)}
    scores = {name: _sqnr_db(reference, samples[:n], float_outputs[:n])
              for name, (reference, _) in candidates.items()}
    kept = "auto" if scores["auto"] >= scores["minmax"] + MIN_GAIN_DB else "minmax"
    verdict = {"kept": kept, "auto_sqnr_db": round(scores["auto"], 2),
               "minmax_sqnr_db": round(scores["minmax"], 2), "samples": n}
    return (*candidates[kept], verdict)


def _sqnr_db(reference: GraphModule, samples: list[tuple], float_outputs: list) -> float:
    """SQNR (dB) over every output of every sample of ``reference`` run exactly."""
    signal = noise = 0.0
    for sample, expected in zip(samples, float_outputs):
        got = _flat(run_exact(reference, *sample))
        want = _flat(expected)
        signal += float(want.pow(2).sum())
        noise += float((want - got).pow(2).sum())
    if noise == 0:
        return math.inf
    return 10.0 * math.log10(max(signal, 1e-30) / noise)


def _flat(out) -> torch.Tensor:
    tensors = []
    torch.fx.node.map_aggregate(out, lambda t: tensors.append(t.detach().double().flatten())
                                if isinstance(t, torch.Tensor) and t.is_floating_point() else t)
    return torch.cat(tensors) if tensors else torch.zeros(0, dtype=torch.float64)
