"""KeepMixedRangeCatFloat: an output that concatenates a detector's class scores with its
boxes is concatenated in float, each input in its own int8 scale.

Accepted spellings: ``torch.cat((boxes, cls.sigmoid()), 1)`` (YOLOv8-style, boxes in
pixels, with coefficient or keypoint rows after), or ``torch.cat((xy, wh, conf), -1)`` of a
split sigmoid, with views, reshapes, permutes or splits between the cat and the program
output; a softmax in place of the sigmoid.

One int8 tensor for boxes of 0 to ~200 px has a step of ~0.8 px: every score in [0, 1]
becomes 0 or 1 (score SQNR 0 dB). The cat reaching an output with one input bounded to
[0, 1] (a sigmoid or softmax, through data movement) and one that is not stays unquantized
(a float cat on the CPU, a few hundred elements); its inputs keep their own ranges, and
the output tensor is as before. ``MIXED_RANGE_KEY`` marks it; the graph module's meta gets
a note for the report (``NOTES_KEY``).
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

aten = torch.ops.aten

MIXED_RANGE_KEY = "mcu_npu_mixed_range_cat"
NOTES_KEY = "mcu_npu_rewrite_notes"
_BOUNDED = {aten.sigmoid.default, aten.softmax.int, aten._softmax.default}
_MOVES = {aten.view.default, aten.reshape.default, aten.permute.default,
          aten.transpose.int, aten.flatten.using_ints, aten.slice.Tensor,
          aten.split_with_sizes.default, aten.split.Tensor, aten.unsqueeze.default,
          aten.squeeze.dim, aten.contiguous.default, aten.clone.default}


class KeepMixedRangeCatFloat(PassBase):
    def call(self, graph_module: GraphModule) -> PassResult:
        outputs = _reaching_output(graph_module)
        marked = False
        for node in graph_module.graph.nodes:
            if node.target != aten.cat.default or node not in outputs:
                continue
            bounded = [_bounded(a) for a in node.args[0]]
            if any(bounded) and not all(bounded):
                node.meta[MIXED_RANGE_KEY] = True
                graph_module.meta.setdefault(NOTES_KEY, []).append(
                    f"{node.name} concatenates scores in [0, 1] with values of another range "
                    "into an output: it runs in float on the CPU, each input in its own int8 "
                    "scale (in one int8 tensor the scores would lose their precision)")
                marked = True
        return PassResult(graph_module, marked)


def _bounded(node) -> bool:
    """``node`` is a sigmoid / softmax result, through data movement."""
    while isinstance(node, Node) and node.op == "call_function":
        if node.target in _BOUNDED:
            return True
        if node.target not in _MOVES and getattr(node.target, "__name__", "") != "getitem":
            return False
        node = node.args[0]
    return False


def _reaching_output(gm: GraphModule) -> set[Node]:
    """Nodes whose value reaches a graph output through data movement alone (not through a
    further cat: the per-level cats of a YOLOv5-style head, which a cat of the levels reads,
    are left as they were: unquantized there, a cat on the NPU met inputs of other scales)."""
    found: set[Node] = set()
    todo: list[Node] = []
    out = next(n for n in gm.graph.nodes if n.op == "output")
    torch.fx.node.map_arg(out.args, lambda a: todo.append(a))
    while todo:
        n = todo.pop()
        if n in found or n.op != "call_function":
            continue
        found.add(n)
        if n.target in _MOVES or getattr(n.target, "__name__", "") == "getitem":
            torch.fx.node.map_arg(n.args, lambda a: todo.append(a))
    return found
