"""The one schema binder: a call node's args and kwargs by schema name, defaults filled in,
so passes, the Edge conversion and the converters read ``a.stride``, not ``node.args[3]``."""

from __future__ import annotations

from types import SimpleNamespace

from torch.fx import Node


def bind(node: Node) -> SimpleNamespace:
    """Arguments of an OpOverload call ``node`` by schema name: positional ones where given
    positionally, keyword ones from kwargs, the schema's default otherwise (None when the
    argument has none)."""
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
