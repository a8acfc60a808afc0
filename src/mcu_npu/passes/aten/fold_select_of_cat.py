"""FoldSelectOfCat: read one index of a concatenation from the piece that holds it.

Before::

    y = cat([unsqueeze(h_0, 1), ..., unsqueeze(h_T-1, 1)], 1)     # an unrolled layer's output
    last = select(y, 1, -1)                                      # the model reads one step

After::

    last = h_T-1                                                 # y and its pieces are dead

A select on the cat's own axis becomes a select of the piece holding the index, or the
unsqueezed tensor itself; a select on another axis moves into the pieces (the cat then
joins the selected pieces, on its axis shifted for the removed one). Only cats read by
selects alone are rewritten, so nothing is computed twice, and dead nodes are removed. For
a recurrent classifier that reads the last step, this drops the per-step output copies.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.errors import UnsupportedModelError
from mcu_npu.passes.aten._recurrent import Emitter, cat_parts, finish, is_call, static_shape

aten = torch.ops.aten


def _foldable(node: Node) -> bool:
    """A select of a cat whose every reader is a select, at an index inside the cat whose
    pieces tile its axis (anything else is left as it is, for torch to judge)."""
    if not is_call(node, aten.select.int) or not is_call(node.args[0], aten.cat.default):
        return False
    cat = node.args[0]
    pieces, cat_dim = cat_parts(cat)
    if not (all(isinstance(p, Node) for p in pieces) and
            all(is_call(u, aten.select.int) for u in cat.users)):
        return False
    shape = static_shape(cat)
    size = shape[node.args[1] % len(shape)]
    sizes = [static_shape(p) for p in pieces]
    return -size <= node.args[2] < size and all(len(s) == len(shape) for s in sizes) and \
        sum(s[cat_dim] for s in sizes) == shape[cat_dim]


def _fold(gm: GraphModule, node: Node) -> tuple[Node, list[Node]]:
    """(the node replacing select ``node``, new selects that may fold further)."""
    cat, dim, index = node.args[0], node.args[1], node.args[2]
    pieces, cat_dim = cat_parts(cat)
    rank = len(static_shape(cat))
    dim %= rank
    emit = Emitter(gm.graph, node)
    if dim != cat_dim:
        selects = [emit(aten.select.int, p, dim, index) for p in pieces]
        return emit(aten.cat.default, selects, cat_dim - (dim < cat_dim)), selects
    index %= static_shape(cat)[dim]
    for piece in pieces:
        size = static_shape(piece)[dim]
        if index < size:
            if is_call(piece, aten.unsqueeze.default) and size == 1 and \
                    piece.args[1] % rank == dim:
                return piece.args[0], []
            inner = emit(aten.select.int, piece, dim, index)
            return inner, [inner]
        index -= size
    raise UnsupportedModelError(  # _foldable checked the index lies in one of the pieces
        f"FoldSelectOfCat: {node.name} reads index {node.args[2]} outside {cat.name}")


class FoldSelectOfCat(PassBase):
    """Rewrite every ``select(cat(...))`` whose cat only selects read into a direct read."""

    def call(self, graph_module: GraphModule) -> PassResult:
        work = [n for n in graph_module.graph.nodes if _foldable(n)]
        modified = bool(work)
        while work:
            node = work.pop()
            if not _foldable(node):
                continue
            cat = node.args[0]
            replacement, new = _fold(graph_module, node)
            node.replace_all_uses_with(replacement)
            graph_module.graph.erase_node(node)
            if not cat.users:  # so the pieces' other selects see them read by selects alone
                graph_module.graph.erase_node(cat)
            work.extend(n for n in new if _foldable(n))
        if modified:
            graph_module.graph.eliminate_dead_code()
            finish(graph_module)
        return PassResult(graph_module, modified)
