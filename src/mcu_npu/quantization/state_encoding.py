"""One encoding for a state tensor: the observer of a lifted state input (the buffer read)
and the observer of the value written back to it get one range, the union of both, so the
state is quantized with one scale and zero point where it is read and where it is written.
The int8 value a call writes is then the one the next call reads, bit for bit: nothing
round the loop is requantized, and the state cannot drift by repeated rounding.
``calibrate`` applies the pairs in force (``tied``) after running the samples, so every
calibration of one compile (the placement trial, the requantization) ties alike.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch.fx import GraphModule, Node

from ..program_state import leaves

_PAIRS: ContextVar[tuple[tuple[int, int], ...]] = ContextVar("mcu_npu_state_pairs", default=())


@contextmanager
def tied(pairs):
    """Within the block, calibration ties (input index, output index) pairs' observers."""
    token = _PAIRS.set(tuple(pairs))
    try:
        yield
    finally:
        _PAIRS.reset(token)


def tie_state_observers(prepared: GraphModule) -> None:
    """Give each tied pair's two observers in ``prepared`` (a calibrated ``prepare_pt2e``
    result) the union of their ranges."""
    pairs = _PAIRS.get()
    if not pairs:
        return
    placeholders = [n for n in prepared.graph.nodes if n.op == "placeholder"]
    outputs = list(leaves(prepared.graph.output_node().args[0]))
    for read, written in pairs:
        if read >= len(placeholders) or written >= len(outputs):
            continue
        observers = [_observer(prepared, u) for u in placeholders[read].users]
        observers.append(_observer(prepared, outputs[written]))
        observers = [o for o in observers if o is not None]
        fixed = [o for o in observers if not hasattr(o, "min_val")]
        if len(observers) < 2:
            continue  # not quantized on both sides: the state stays float
        if fixed:  # a fixed encoding (a tanh's or sigmoid's output): the other side takes it
            if len({(float(o.scale), int(o.zero_point)) for o in fixed}) != 1:
                continue
            o = fixed[0]
            lo = (o.quant_min - int(o.zero_point)) * float(o.scale)
            hi = (o.quant_max - int(o.zero_point)) * float(o.scale)
        else:
            lo = min(float(o.min_val) for o in observers)
            hi = max(float(o.max_val) for o in observers)
        for o in observers:
            if not hasattr(o, "min_val"):
                continue
            o.min_val = torch.tensor(lo, dtype=o.min_val.dtype)
            o.max_val = torch.tensor(hi, dtype=o.max_val.dtype)
            if hasattr(o, "pin_to_min_max"):  # a calibration method's observer
                o.pin_to_min_max()


def _observer(prepared: GraphModule, node) -> object | None:
    if not isinstance(node, Node) or node.op != "call_module":
        return None
    observer = getattr(prepared, node.target)
    observer = getattr(observer, "activation_post_process", observer)  # fake quant
    return observer if hasattr(observer, "min_val") or hasattr(observer, "scale") else None

