"""Argument helpers of the converters: the schema binder, static shapes, pairs."""

from __future__ import annotations

from torch.fx import Node

from ..graph.schema import bind  # noqa: F401  (the converters' binder)


def shape_of(node: Node) -> tuple[int, ...]:
    """The static shape of a node's tensor output (from ``meta['val']``)."""
    val = node.meta["val"]
    return tuple(int(d) for d in val.shape)


def pair(v, n: int = 2) -> tuple[int, ...]:
    """Expand an int or a short list (as conv/pool args allow) to ``n`` ints."""
    if isinstance(v, int):
        return (v,) * n
    v = list(v)
    if len(v) == 1:
        v = v * n
    return tuple(int(x) for x in v)
