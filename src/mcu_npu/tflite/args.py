"""Bind a node's args and kwargs to its schema once, so converters read ``a.stride``."""

from __future__ import annotations

from types import SimpleNamespace

from torch.fx import Node


def bind(node: Node) -> SimpleNamespace:
    """Arguments of ``node`` by schema name, with the schema's defaults filled in."""
    schema = node.target._schema
    values = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args) and not arg.kwarg_only:
            values[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            values[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            values[arg.name] = arg.default_value
        else:
            values[arg.name] = None
    return SimpleNamespace(**values)


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
