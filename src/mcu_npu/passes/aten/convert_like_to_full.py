"""ConvertLikeToFull: a tensor made from another's shape alone is a ``full`` of that shape.

Before::

    scale = mean(ones_like(x), [1], True)       # a no-op scaler (PatchTST's NOP scaler)
    loc = mean(zeros_like(x), [1], True)
    y = (x - loc) / scale

After::

    scale = mean(full([1, 64, 3], 1.0), [1], True)
    loc = mean(full([1, 64, 3], 0.0), [1], True)
    y = (x - loc) / scale

``ones_like``, ``zeros_like``, ``full_like``, ``new_ones``, ``new_zeros`` and ``new_full``
read only the static shape (and dtype) of their tensor argument, never its values. Left as
they are, they count as computed from the input: ``FoldConstants`` does not fold what reads
them, they run on the CPU, and ExecuTorch's Cortex-M lowering drops the quantize after them
(it takes it for a constant's), handing a float tensor to the NPU partition or to an int8
kernel, a program the device refuses. As ``full`` they are constants like any other:
what reads only them is folded, and a quantized one is made in int8
(``passes/edge/quantize_full_as_integer.py``). ``empty_like`` (no value) is left alone.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import finish

aten = torch.ops.aten

# op -> (fill value, or the index of the argument holding it; index of the new size or None)
_LIKE = {aten.ones_like.default: (1, None), aten.zeros_like.default: (0, None),
         aten.full_like.default: ("arg", None), aten.new_ones.default: (1, 1),
         aten.new_zeros.default: (0, 1), aten.new_full.default: ("arg", 1)}


def _full_args(node: Node):
    """(size, fill value, dtype) of the ``full`` ``node`` makes; None when not static."""
    if node.op != "call_function" or node.target not in _LIKE:
        return None
    source = node.args[0]
    val = source.meta.get("val") if isinstance(source, Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    fill, size_at = _LIKE[node.target]
    size = node.args[size_at] if size_at is not None else list(val.shape)
    if fill == "arg":
        fill = node.args[2 if size_at is not None else 1]
    if not all(isinstance(d, int) for d in size) or not isinstance(fill, (int, float, bool)):
        return None
    return list(size), fill, node.kwargs.get("dtype") or val.dtype


class ConvertLikeToFull(PassBase):
    """Replace each ``*_like`` / ``new_*`` of a static-shaped tensor by a ``full``."""

    def call(self, graph_module: GraphModule) -> PassResult:
        graph = graph_module.graph
        modified = False
        for node in list(graph.nodes):
            made = _full_args(node)
            if made is None:
                continue
            size, fill, dtype = made
            kwargs = {"dtype": dtype, "device": torch.device("cpu"), "pin_memory": False}
            with graph.inserting_before(node):
                full = graph.call_function(aten.full.default, (size, fill), kwargs)
            full.meta = dict(node.meta)  # the same shape and dtype: the same fake value
            node.replace_all_uses_with(full)
            graph.erase_node(node)
            modified = True
        if modified:
            finish(graph_module)
        return PassResult(graph_module, modified)
