"""ConvertPadModeToSlices: a reflect, replicate or circular pad becomes slices of its input
and a concatenation per padded axis, before quantization.

Before::

    y = pad(x, [2, 1], "reflect")      # x: (N, C, L), a speech or audio front-end's padding

After::

    y = cat([slice(x, 2, 2, 3), slice(x, 2, 1, 2), slice(x, 2, 0, L), slice(x, 2, L - 2, L - 1)],
            2)

Core-ATen decomposition would turn these pads into index ops after quantization, left
unquantized on the CPU. As slices and a concatenation they keep the input's quantization
and run on every NPU; exact. A pad that reads more than ``MAX_RUNS`` pieces per axis stays.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, replace_nodes
from mcu_npu.passes.aten.convert_constant_index_to_slices import MAX_RUNS, slices_of
from ...graph.schema import bind

aten = torch.ops.aten


def _source_indices(mode: str, size: int, before: int, after: int) -> list[int] | None:
    """The input index each output position along one axis reads, or None if invalid."""
    if min(before, after) < 0:
        return None
    body = list(range(size))
    if mode == "reflect" and max(before, after) < size:
        return [before - i for i in range(before)] + body + [size - 2 - i for i in range(after)]
    if mode == "replicate":
        return [0] * before + body + [size - 1] * after
    if mode == "circular" and max(before, after) <= size:
        return [size - before + i for i in range(before)] + body + list(range(after))
    return None


def _plan(node: Node) -> list[tuple[int, list[tuple[int, int, int]]]] | None:
    """(axis, slices) for each padded axis of a pad by mode, or None."""
    if node.op != "call_function" or node.target != aten.pad.default or node.kwargs:
        return None
    x, pads = node.args[0], list(node.args[1])
    mode = bind(node).mode
    if mode not in ("reflect", "replicate", "circular") or "val" not in x.meta:
        return None
    shape = x.meta["val"].shape
    plan = []
    for i in range(len(pads) // 2):
        axis = len(shape) - 1 - i
        if pads[2 * i] == pads[2 * i + 1] == 0:
            continue
        indices = _source_indices(mode, shape[axis], pads[2 * i], pads[2 * i + 1]) \
            if isinstance(shape[axis], int) else None
        runs = None if indices is None else slices_of(indices)
        if runs is None or len(runs) > MAX_RUNS:
            return None
        plan.append((axis, runs))
    return plan


class ConvertPadModeToSlices(PassBase):
    """Rewrite every reflect / replicate / circular pad into slices and concatenations."""

    def call(self, graph_module: GraphModule) -> PassResult:
        def rewrite(gm: GraphModule, node: Node) -> Node:
            emit = Emitter(gm.graph, node)
            x = node.args[0]
            for axis, runs in _plan(node):
                # the body is a slice too: a cat that reads its input both whole and through
                # slices would make the quantizer's shared parameters refer to themselves
                parts = [emit(aten.slice.Tensor, x, axis, start, end, step)
                         for start, end, step in runs]
                x = emit(aten.cat.default, parts, axis)
            return x

        changed = replace_nodes(graph_module, lambda n: _plan(n) is not None, rewrite)
        return PassResult(graph_module, changed)
