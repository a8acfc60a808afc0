"""KeepMixedRangeCatFloat: an output that concatenates values of very different ranges (a
detector's boxes in pixels, class scores in [0, 1], mask coefficients) is assembled in
float from parts that each keep their own int8 scale.

One int8 tensor for boxes of 0 to ~200 px has a step of ~0.8 px: every score in [0, 1]
becomes 0 or 1 (score SQNR 0 dB). Here a concatenation reaching a program output through
data movement alone whose inputs are of different kinds (bounded to [0, 1]: a sigmoid or
softmax through data movement; or not) is left unquantized, with the data movement between
it and the output: each input is quantized on its own. The edge pass
``SplitMixedRangeOutputs`` then takes that float tail out of the program: its inputs become
program outputs of their own and the host's ``run`` puts them back together.

Two rewrites come first, only where they make such a concatenation:

* nested concatenations on one axis become one (``cat((cat((boxes, scores)), coef))``,
  YOLOv8-seg): each of the three gets its own scale;
* a concatenation over levels of per-level mixed concatenations on the last axis, each
  reshaped keeping that axis (YOLOv5's ``cat([cat((xy, wh, conf), -1).view(b, -1, no)])``),
  becomes one concatenation per kind over the levels, then one mixed concatenation on the
  last axis: the per-level concatenations and the decoding stay on the NPU, one float
  concatenation is left.

``MIXED_RANGE_KEY`` marks the float nodes; the graph module's meta gets a note for the
report (``NOTES_KEY``). Graphs without such a concatenation are left as they are.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from ...graph.schema import bind
from ._recurrent import Emitter, finish, static_shape
from .decompose_reshape import _viewable

aten = torch.ops.aten

MIXED_RANGE_KEY = "mcu_npu_mixed_range_cat"
NOTES_KEY = "mcu_npu_rewrite_notes"
_BOUNDED = {aten.sigmoid.default, aten.softmax.int, aten._softmax.default}
_VIEWS = {aten.view.default, aten.reshape.default, aten._unsafe_view.default}
_MOVES = {*_VIEWS, aten.permute.default, aten.transpose.int, aten.flatten.using_ints,
          aten.slice.Tensor, aten.split_with_sizes.default, aten.split.Tensor,
          aten.unsqueeze.default, aten.squeeze.dim, aten.contiguous.default,
          aten.clone.default}
_UNIT, _OTHER, _MIXED = "in [0, 1]", "other", "mixed"


def _is(node, targets) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


def _moves(node) -> bool:
    return _is(node, _MOVES) or (isinstance(node, Node) and node.op == "call_function"
                                 and getattr(node.target, "__name__", "") == "getitem")


def _cat(node):
    """(inputs, non-negative axis) of a cat node, else None."""
    if not _is(node, {aten.cat.default}):
        return None
    dim = bind(node).dim
    return list(node.args[0]), dim % len(static_shape(node))


def _kind(node) -> str:
    """_UNIT for a sigmoid / softmax result through data movement, _MIXED for a cat of
    different kinds, else _OTHER."""
    while True:
        parts = _cat(node)
        if parts is not None:
            kinds = {_kind(p) for p in parts[0]}
            return kinds.pop() if len(kinds) == 1 else _MIXED
        if _is(node, _BOUNDED):
            return _UNIT
        if not _moves(node):
            return _OTHER
        node = node.args[0]


def _flat(node: Node, dim: int) -> list:
    """The inputs of cat ``node`` with single-use inner cats on the same axis opened up."""
    out = []
    for p in _cat(node)[0]:
        inner = _cat(p)
        out += _flat(p, dim) if inner and inner[1] == dim and len(p.users) == 1 else [p]
    return out


def _groups(parts: list) -> list[list]:
    """Consecutive parts of one kind, together."""
    groups: list[list] = []
    for p in parts:
        if groups and _kind(groups[-1][0]) == _kind(p):
            groups[-1].append(p)
        else:
            groups.append([p])
    return groups


class KeepMixedRangeCatFloat(PassBase):
    def call(self, graph_module: GraphModule) -> PassResult:
        graph = graph_module.graph
        changed = False
        tail = _reaching_output(graph_module)
        erased: set[Node] = set()
        for node in [n for n in reversed(graph.nodes) if n in tail and _cat(n)]:
            if node not in erased and node.users and (_hoist_levels(graph, node)
                                                      or _flatten(graph, node)):
                erased.add(node)
                changed = True
        if changed:
            graph.eliminate_dead_code()
            finish(graph_module)
        tail = _reaching_output(graph_module)
        floats: set[Node] = set()
        for node in graph.nodes:  # in order: a node after a float one is float too
            if node not in tail:
                continue
            parts = _cat(node)
            if parts is not None and (len({_kind(p) for p in parts[0]}) > 1
                                      or any(p in floats for p in parts[0])):
                floats.add(node)
            elif parts is None and node.args and node.args[0] in floats:
                floats.add(node)
        for node in floats:
            node.meta[MIXED_RANGE_KEY] = True
        mixed = [n.name for n in floats if _cat(n)]
        if mixed:
            graph_module.meta.setdefault(NOTES_KEY, []).append(
                f"{', '.join(mixed)} concatenate{'s' * (len(mixed) == 1)} values of different "
                "ranges (scores in [0, 1] and boxes or coefficients) into an output: each part "
                "is quantized on its own and becomes a program output of its own, which run() "
                "puts back together (program_io['assemble'])")
        return PassResult(graph_module, changed or bool(floats))


def _flatten(graph, node: Node) -> bool:
    """Nested cats on ``node``'s axis opened into ``node``, where that makes it mixed."""
    parts, dim = _cat(node)
    flat = _flat(node, dim)
    if flat == parts or len({_kind(p) for p in flat}) < 2:
        return False
    joined = Emitter(graph, node)(aten.cat.default, flat, dim)
    node.replace_all_uses_with(joined)
    graph.erase_node(node)
    return True


def _hoist_levels(graph, node: Node) -> bool:
    """YOLOv5's cat over levels of reshaped per-level mixed cats (module docstring): one cat
    per kind over the levels, then one cat of the kinds on the last axis."""
    views, axis = _cat(node)
    rank = len(static_shape(node))
    if axis == rank - 1 or len(views) < 2:
        return False
    levels = []
    for v in views:
        inner = _cat(v.args[0]) if _is(v, _VIEWS) else None
        if inner is None or len(v.users) != 1 or len(v.args[0].users) != 1:
            return False
        shape, inner_shape = static_shape(v), static_shape(v.args[0])
        if inner[1] != len(inner_shape) - 1 or shape[-1] != inner_shape[-1] \
                or len(shape) != rank:
            return False
        groups = _groups(inner[0])
        levels.append((shape, [(g, sum(static_shape(p)[-1] for p in g)) for g in groups]))
    pattern = [(_kind(g[0]), size) for g, size in levels[0][1]]
    if len(pattern) < 2 or any([(_kind(g[0]), size) for g, size in groups] != pattern
                               for _, groups in levels):
        return False
    emit = Emitter(graph, node)
    kinds = []
    for k, (_, size) in enumerate(pattern):
        pieces = []
        for shape, groups in levels:
            group = groups[k][0]
            src = group[0] if len(group) == 1 else emit(aten.cat.default, group, -1)
            if not _viewable(src.meta["val"], [*shape[:-1], size]):
                src = emit(aten.contiguous.default, src)
            pieces.append(emit(aten.view.default, src, [*shape[:-1], size]))
        kinds.append(emit(aten.cat.default, pieces, axis))
    joined = emit(aten.cat.default, kinds, rank - 1)
    node.replace_all_uses_with(joined)
    graph.erase_node(node)
    return True


def _reaching_output(gm: GraphModule) -> set[Node]:
    """Nodes whose value reaches a graph output through data movement and cats alone."""
    found: set[Node] = set()
    todo: list[Node] = []
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    torch.fx.node.map_arg(out.args, lambda a: todo.append(a))
    while todo:
        n = todo.pop()
        if n in found or n.op != "call_function":
            continue
        found.add(n)
        if _moves(n) or _cat(n) is not None:
            torch.fx.node.map_arg(n.args, lambda a: todo.append(a))
    return found
