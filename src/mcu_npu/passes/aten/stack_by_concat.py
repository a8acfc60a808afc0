"""StackByConcat: ``cat([unsqueeze(x_i, d), ...], d)`` and ``stack([x_i, ...], d)`` become
``view(cat([x_i, ...], d))``.

Before::

    y = cat([unsqueeze(h_0, 1), ..., unsqueeze(h_T-1, 1)], 1)    # [B, T, H] from [B, H] steps
    s = sum(stack([skip_0, skip_1, skip_2], 0), 0)                # a TCN's skip connections

After::

    y = view(cat([h_0, ..., h_T-1], 1), [B, T, H])                # [B, T*H], same memory
    s = sum(view(cat([skip_0, skip_1, skip_2], 0), [3, ...]), 0)

A stack on the last axis becomes the concatenation of the unsqueezed pieces (the quantizer
annotates no ``stack``, which left it, and the ops around it, unquantized on the CPU).

For ``d`` below the pieces' rank the two are the same row-major data. An NPU compiler gives
each unsqueezed piece a copy of its own before the concatenation copies it again; here the
pieces go in as they are and one view follows. Runs after ``FoldSelectOfCat``, which reads
single steps out of the unsqueezed form.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, cat_parts, finish, is_call, static_shape
from ...graph.schema import bind

aten = torch.ops.aten


def _stack(node: Node) -> bool:
    return is_call(node, aten.stack.default)


def _stackable(node: Node) -> bool:
    if _stack(node):
        return True
    if not is_call(node, aten.cat.default):
        return False
    pieces, dim = cat_parts(node)
    rank = len(static_shape(node))
    return len(pieces) > 1 and dim < rank - 1 and all(
        is_call(p, aten.unsqueeze.default) and p.args[1] % rank == dim for p in pieces)


class StackByConcat(PassBase):
    """Rewrite every stack, and every concatenation of pieces unsqueezed on the
    concatenation axis."""

    def call(self, graph_module: GraphModule) -> PassResult:
        found = [n for n in graph_module.graph.nodes if _stackable(n)]
        for node in found:
            emit = Emitter(graph_module.graph, node)
            rank = len(static_shape(node))
            if _stack(node):
                pieces = list(node.args[0])
                dim = bind(node).dim % rank
                if dim == rank - 1:  # interleaved: the pieces unsqueezed, concatenated
                    joined = emit(aten.cat.default,
                                  [emit(aten.unsqueeze.default, p, dim) for p in pieces], dim)
                    node.replace_all_uses_with(joined)
                    graph_module.graph.erase_node(node)
                    continue
            else:
                pieces, dim = cat_parts(node)
                pieces = [p.args[0] for p in pieces]
            joined = emit(aten.cat.default, pieces, dim)
            node.replace_all_uses_with(emit(aten.view.default, joined, list(static_shape(node))))
            graph_module.graph.erase_node(node)
        if found:
            graph_module.graph.eliminate_dead_code()
            finish(graph_module)
        return PassResult(graph_module, bool(found))
