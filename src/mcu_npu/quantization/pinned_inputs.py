"""Pinned input ranges: the observer of a declared integer input (``io_spec.RANGES``) gets the
sensor's whole range, not the range the calibration samples happened to reach.

A uint8 input pinned to [0, 255] quantizes with scale 1 and zero point -128 (``q = pixel -
128``), an int8 one pinned to [-128, 127] with scale 1 and zero point 0 (``q = x``): one
step per value, so the quantized program reads the sensor's numbers exactly, whatever the
calibration data. ``calibrate`` applies the ranges in force (``pinned``) after running the
samples, so every calibration of one compile (the placement trial, the requantization)
pins alike.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch.fx import GraphModule

_RANGES: ContextVar[dict[int, tuple[float, float]]] = ContextVar("mcu_npu_pinned_inputs",
                                                                default={})


@contextmanager
def pinned(ranges: dict[int, tuple[float, float]]):
    """Within the block, calibration pins user input ``i``'s observers to ``ranges[i]``."""
    token = _RANGES.set(dict(ranges))
    try:
        yield
    finally:
        _RANGES.reset(token)


def pin_input_observers(prepared: GraphModule) -> None:
    """Set the observers reading each pinned user input of ``prepared`` (a ``prepare_pt2e``
    result, after calibration) to its range."""
    ranges = _RANGES.get()
    if not ranges:
        return
    placeholders = [n for n in prepared.graph.nodes if n.op == "placeholder"]
    for index, (lo, hi) in ranges.items():
        if index >= len(placeholders):
            continue
        for user in placeholders[index].users:
            if user.op != "call_module":
                continue
            observer = getattr(prepared, user.target)
            observer = getattr(observer, "activation_post_process", observer)  # fake quant
            if hasattr(observer, "min_val") and hasattr(observer, "max_val"):
                observer.min_val = torch.tensor(float(lo), dtype=observer.min_val.dtype)
                observer.max_val = torch.tensor(float(hi), dtype=observer.max_val.dtype)
                if hasattr(observer, "pin_to_min_max"):  # a calibration method's observer
                    observer.pin_to_min_max()
