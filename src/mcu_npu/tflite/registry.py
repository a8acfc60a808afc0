"""The one registry of operator converters, keyed by Edge op objects.

A converter declares, next to its conversion, the checks that say whether it can convert a
node. Each check is a small function whose docstring is the user-facing reason for a
rejection; the partitioner and the report read the same registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch
from torch.fx import Node

aten = torch.ops.aten

if TYPE_CHECKING:
    from ..targets import Target
    from .context import Context

Check = Callable[[Node, "Target | None"], bool]


@dataclass(frozen=True)
class OpConverter:
    targets: tuple
    convert: Callable[["Context", Node], None]
    checks: tuple[Check, ...] = ()

    def rejection(self, node: Node, target: Target | None = None) -> str | None:
        """The reason this converter refuses ``node``, or None when it accepts it."""
        for check in self.checks:
            try:
                ok = check(node, target)
            except Exception as exc:  # a check that cannot decide rejects
                return f"{(check.__doc__ or check.__name__).strip()} ({exc})"
            if not ok:
                return (check.__doc__ or check.__name__).strip()
        return None


REGISTRY: dict[object, OpConverter] = {}

# ATen ops that core-ATen decomposition would break up but that convert better whole
# (linear keeps its weight constant and its rank; hardswish and prelu are single TFLite ops).
PRESERVED_ATEN_OPS = (aten.linear.default, aten.hardswish.default, aten.prelu.default)


def converts(*targets, checks: tuple[Check, ...] = ()):
    """Register ``fn(ctx, node)`` as the converter of ``targets`` (Edge op overloads)."""

    def register(fn):
        conv = OpConverter(tuple(targets), fn, tuple(checks))
        for t in targets:
            if t in REGISTRY:
                raise ValueError(f"{t} already has a converter")
            REGISTRY[t] = conv
        return fn

    return register


def lookup(target) -> OpConverter | None:
    """The converter of Edge op ``target`` (``mcu_npu.tflite`` imports them all), if any."""
    return REGISTRY.get(target)
