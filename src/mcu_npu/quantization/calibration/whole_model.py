"""Auto's whole-model check. Each per-tensor choice lowers its own tensor's quantization
error, yet together they can cost accuracy: a clipped tensor's error passes through every
layer after it, and what a range buys on one tensor says nothing of how the next layers
amplify its clipping. So after calibration the model runs the calibration samples twice,
each observer quantizing what it sees as the converted reference will: once with auto's
per-tensor ranges, once with MinMax's everywhere (in float64: the same verdict on every
host). Auto's ranges are kept only when their output SQNR against the float outputs is
higher by ``MIN_GAIN_DB``; otherwise every tensor auto set falls back to MinMax. The
verdict goes in the reference's ``meta[CHECK_KEY]`` for the report."""

from __future__ import annotations

import math
from typing import Callable, ContextManager

import torch
from torch.fx import GraphModule

from torchao.quantization.pt2e.observer import ObserverBase

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


def check(prepared: GraphModule, samples: list[tuple], float_outputs: list,
          float64: Callable[[], ContextManager]) -> dict | None:
    """Auto's verdict on calibrated ``prepared``: each candidate's ranges are simulated on
    ``samples`` (``simulated_sqnr``, inside ``float64()``, which makes the graph compute in
    float64) and scored against ``float_outputs``; where MinMax's win, auto's observers of
    ``prepared`` take MinMax's range (in place). None when auto moved no tensor; else the
    verdict, with ``kept_sqnr_db``: the kept ranges' score unrounded, which the bias
    correction starts from (not stored with the verdict)."""
    moved = auto_observers(prepared)
    if not moved or not float_outputs:
        return None
    n = min(len(samples), len(float_outputs), MAX_SAMPLES)
    candidates = {"auto": observer_params(prepared)}
    chosen = [(o, o._chosen) for o in moved]
    for observer in moved:
        observer.pin_to_min_max()
    candidates["minmax"] = observer_params(prepared)
    kept = "auto"  # also where the simulation raises: auto's ranges stand unchecked
    try:
        with float64():
            scores = {name: simulated_sqnr(prepared, params, samples[:n], float_outputs[:n])
                      for name, params in candidates.items()}
        if scores["auto"] < scores["minmax"] + MIN_GAIN_DB:
            kept = "minmax"
    finally:
        if kept == "auto":
            for observer, choice in chosen:
                observer.method, observer._chosen = "auto", choice
    return {"kept": kept, "auto_sqnr_db": round(scores["auto"], 2),
            "minmax_sqnr_db": round(scores["minmax"], 2), "samples": n,
            "kept_sqnr_db": scores[kept]}


def observer_params(prepared: GraphModule) -> dict:
    """id of each observer -> (scale, zero point, qmin, qmax, channel axis), or None for
    one with no integer parameters (a placeholder's)."""
    params = {}
    for m in prepared.modules():
        if not isinstance(m, ObserverBase):
            continue
        try:
            scale, zero_point = m.calculate_qparams()
            qmin, qmax = int(m.quant_min), int(m.quant_max)
        except (AttributeError, NotImplementedError, RuntimeError, TypeError, ValueError):
            params[id(m)] = None
            continue
        s = scale.to(torch.float32).double()
        axis = getattr(m, "ch_axis", None) if s.numel() > 1 else None
        params[id(m)] = (s, zero_point.to(torch.int64).double(), qmin, qmax, axis)
    return params


def simulated_sqnr(prepared: GraphModule, params: dict, samples: list[tuple],
                   float_outputs: list) -> float:
    """SQNR (dB) over every output of ``samples`` of ``prepared`` with each observer
    quantizing and dequantizing what it sees by its ``params``, as the converted reference's
    quantize / dequantize pairs do: the reference's arithmetic without converting (a
    converted copy of a 49-step recurrent network costs seconds, and its exact runs
    through an interpreter most of a second each)."""
    observers = [m for m in prepared.modules() if id(m) in params]
    try:
        for m in observers:
            m.forward = _fake_quantize(params[id(m)])
        with torch.no_grad():
            got = [prepared(*(_as_double(x) for x in sample)) for sample in samples]
    finally:
        for m in observers:
            del m.forward
    return outputs_sqnr(got, float_outputs)


def outputs_sqnr(outputs: list, float_outputs: list) -> float:
    """SQNR (dB) of every floating-point output of ``outputs`` (one per sample) against
    ``float_outputs``, summed over the samples in float64."""
    signal = noise = 0.0
    for out, expected in zip(outputs, float_outputs):
        got, want = _flat(out), _flat(expected)
        signal += float(want.pow(2).sum())
        noise += float((want - got).pow(2).sum())
    if noise == 0:
        return math.inf
    return 10.0 * math.log10(max(signal, 1e-30) / noise)


def _fake_quantize(params):
    """Quantize and dequantize by ``params`` in float64 from the float32 scale, rounding
    half to even (``exact``'s quantize); None params: pass as it is."""
    if params is None:
        return lambda x: x
    s, z, qmin, qmax, axis = params
    if axis is None:  # round(x / s) + z clamped to [qmin, qmax], less z: the same integers
        s, low, high = s.reshape(()), float(qmin - z.reshape(())), float(qmax - z.reshape(()))

        def per_tensor(x):
            if not x.is_floating_point():
                return x
            return _round(torch.clamp(x.double() / s, low, high)) * s
        return per_tensor

    last = []  # (input, its version, output): a weight is the same tensor every run

    def forward(x):
        if not x.is_floating_point():
            return x
        if last and last[0] is x and last[1] == x._version:
            return last[2]
        shape = [1] * x.dim()
        shape[axis] = -1
        sv, zv = s.reshape(shape), z.reshape(shape)
        out = _round(torch.clamp(x.double() / sv, qmin - zv, qmax - zv)) * sv
        last[:] = (x, x._version, out)
        return out
    return forward


_ROUNDER = 1.5 * 2.0 ** 52


def _round(x: torch.Tensor) -> torch.Tensor:
    """``torch.round`` of float64 ``x`` (half to even) for |x| < 2**51, by adding and taking
    away 1.5 * 2**52: the same integers in a fifth of the time (``torch.round`` on float64
    is not vectorised). Callers clamp to the int8 or int16 range first."""
    return (x + _ROUNDER).sub_(_ROUNDER)


def _as_double(x):
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def _flat(out) -> torch.Tensor:
    tensors = []
    torch.fx.node.map_aggregate(out, lambda t: tensors.append(t.detach().double().flatten())
                                if isinstance(t, torch.Tensor) and t.is_floating_point() else t)
    return torch.cat(tensors) if tensors else torch.zeros(0, dtype=torch.float64)
