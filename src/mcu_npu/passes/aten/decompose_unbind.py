"""DecomposeUnbind: ``unbind`` as one ``select`` per piece, before quantization.

Before::

    q, k, v = unbind(qkv, 0)           # getitem 0, 1, 2 of the unbind

After::

    q, k, v = select(qkv, 0, 0), select(qkv, 0, 1), select(qkv, 0, 2)

Core-ATen decomposition turns ``unbind`` into a slice and a squeeze per piece after
quantization, between one quantize / dequantize pair: data movement with float on one side,
which cannot run in int8. Selects, made here, each share their input's quantization
parameters and convert to a STRIDED_SLICE (no requantize), as attention's ``q, k, v =
qkv.unbind(0)`` (or ``q, k, v = qkv``) needs. Unbinds read other than by index are left.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, finish, is_call
from ...graph.schema import bind

aten = torch.ops.aten
UNBIND = aten.unbind.int


def _read_by_index(node: Node) -> bool:
    """An unbind whose every reader takes one piece by a constant index."""
    return is_call(node, UNBIND) and all(
        is_call(u, operator.getitem) and isinstance(u.args[1], int) for u in node.users)


class DecomposeUnbind(PassBase):
    """Rewrite every ``unbind`` read by index into one ``select`` per piece read."""

    def call(self, graph_module: GraphModule) -> PassResult:
        work = [n for n in graph_module.graph.nodes if _read_by_index(n)]
        for node in work:
            x = node.args[0]
            dim = bind(node).dim
            for item in list(node.users):
                select = Emitter(graph_module.graph, item)(aten.select.int, x, dim, item.args[1])
                item.replace_all_uses_with(select)
                graph_module.graph.erase_node(item)
            graph_module.graph.erase_node(node)
        if work:
            finish(graph_module)
        return PassResult(graph_module, bool(work))
