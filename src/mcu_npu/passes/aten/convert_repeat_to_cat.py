"""ConvertRepeatToCat: ``repeat`` becomes a concatenation of copies before quantization.

Before::

    y = repeat(x, [1, 3, 1])       # x: (N, C, T), e.g. a mask or embedding tiled over channels

After::

    y = cat([x, x, x], 1)

Leading repeats beyond the input's rank first add those axes (``unsqueeze``). No NPU
compiler takes a TILE with its multiples, while every NPU concatenates; the copies share
the input's quantization, so the rewrite is exact in float and in int8.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, replace_nodes

aten = torch.ops.aten

MAX_COPIES = 64
"""Above this many copies in all, a repeat stays as it is (a concatenation of hundreds of
inputs costs more than it saves)."""


def _repeat(node: Node) -> bool:
    if node.op != "call_function" or node.target != aten.repeat.default:
        return False
    repeats = node.args[1]
    copies = 1
    for r in repeats:
        if not isinstance(r, int):
            return False
        copies *= r
    return 1 < copies <= MAX_COPIES or copies == 1


def _as_cat(graph_module: GraphModule, node: Node) -> Node:
    emit = Emitter(graph_module.graph, node)
    x, repeats = node.args[0], list(node.args[1])
    rank = len(x.meta["val"].shape)
    for _ in range(len(repeats) - rank):
        x = emit(aten.unsqueeze.default, x, 0)
    for dim, r in enumerate(repeats):
        if r > 1:
            x = emit(aten.cat.default, [x] * r, dim)
    if x is node.args[0]:  # every repeat is 1: a copy
        x = emit(aten.clone.default, x)
    return x


class ConvertRepeatToCat(PassBase):
    """Rewrite every ``repeat`` with static repeats into concatenations."""

    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module, replace_nodes(graph_module, _repeat, _as_cat))
