"""ConvertConstantIndexToSlices: an index by a constant index tensor along one axis becomes
slices (and a concatenation) before quantization.

Before::

    y = index(x, [None, None, idx])    # idx: a constant, e.g. arange(0, T, 2) or [3, 1, 0, 2]

After::

    y = slice(x, 2, 0, T, 2)           # the indices are one increasing progression
    y = cat([slice(x, 1, 3, 4), slice(x, 1, 1, 2), slice(x, 1, 0, 1), slice(x, 1, 2, 3)], 1)

Signal models pick time steps or channels by a constant list (decimation, a channel order,
a montage). The indices are read once here: an increasing arithmetic progression is one
strided slice, anything else the concatenation of its runs of consecutive indices. Slices
and concatenation keep the input's quantization, every NPU runs them, and the rewrite is
exact. Indexing by several tensors, by a boolean mask or by a run-time tensor is left as is.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, replace_nodes

aten = torch.ops.aten

MAX_RUNS = 32
"""Above this many runs of consecutive indices the index stays as it is."""


def _constant(gm: GraphModule, node) -> torch.Tensor | None:
    if not isinstance(node, Node) or node.op != "get_attr":
        return None
    value = getattr(gm, node.target, None)
    return value.detach() if isinstance(value, torch.Tensor) else None


def slices_of(indices: list[int]) -> list[tuple[int, int, int]]:
    """(start, end, step) slices whose concatenation reads ``indices`` in order."""
    if len(indices) > 1:
        step = indices[1] - indices[0]
        if step > 0 and all(b - a == step for a, b in zip(indices, indices[1:])):
            return [(indices[0], indices[-1] + 1, step)]
    runs, start = [], 0
    for i in range(1, len(indices) + 1):
        if i == len(indices) or indices[i] != indices[i - 1] + 1:
            runs.append((indices[start], indices[i - 1] + 1, 1))
            start = i
    return runs


def _plan(gm: GraphModule, node: Node) -> tuple[int, list[tuple[int, int, int]]] | None:
    """(axis, slices) of an index by one constant 1-D integer tensor, or None."""
    if node.op != "call_function" or node.target != aten.index.Tensor:
        return None
    x, indices = node.args[0], list(node.args[1])
    given = [i for i, t in enumerate(indices) if t is not None]
    if len(given) != 1 or not isinstance(x, Node) or "val" not in x.meta:
        return None
    axis = given[0]
    value = _constant(gm, indices[axis])
    if value is None or value.dim() != 1 or value.numel() == 0 or \
            value.dtype not in (torch.int64, torch.int32):
        return None
    size = x.meta["val"].shape[axis]
    if not isinstance(size, int) or bool(((value < -size) | (value >= size)).any()):
        return None
    runs = slices_of([int(i) % size for i in value.tolist()])
    return (axis, runs) if len(runs) <= MAX_RUNS else None


class ConvertConstantIndexToSlices(PassBase):
    """Rewrite every index by one constant index tensor into slices and a concatenation."""

    def call(self, graph_module: GraphModule) -> PassResult:
        def rewrite(gm: GraphModule, node: Node) -> Node:
            axis, runs = _plan(gm, node)
            emit = Emitter(gm.graph, node)
            x = node.args[0]
            parts = [emit(aten.slice.Tensor, x, axis, start, end, step)
                     for start, end, step in runs]
            return parts[0] if len(parts) == 1 else emit(aten.cat.default, parts, axis)

        changed = replace_nodes(graph_module, lambda n: _plan(graph_module, n) is not None,
                                rewrite)
        return PassResult(graph_module, changed)
