"""DecomposeReshape: ``reshape`` as the ``view`` (and copy) it stands for, before quantization.

Before::

    y = reshape(x, shape)

After::

    y = view(x, shape)                       # x's strides allow a view
    y = view(contiguous(x), shape)           # x is e.g. a permute (attention's heads merge)

Core-ATen decomposition does the same after quantization, where the copy it inserts sits
between the reshape's quantize / dequantize pair and no other: a data movement op with float
on one side, which cannot run in int8. Split here, the copy and the view each share their
input's quantization parameters, so both stay int8 and convert without a requantize.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, fake_value, finish, is_call

aten = torch.ops.aten
RESHAPE = aten.reshape.default


def _reshape(node: Node) -> bool:
    """A reshape of a tensor with static shape metadata (anything else is left to torch)."""
    if not is_call(node, RESHAPE):
        return False
    val = node.args[0].meta.get("val") if isinstance(node.args[0], Node) else None
    return isinstance(val, torch.Tensor) and \
        all(isinstance(d, int) for d in (*val.shape, *val.stride()))


def _viewable(val: torch.Tensor, shape) -> bool:
    try:
        val.view(shape)
    except (RuntimeError, ValueError):  # eager and fake tensors refuse differently
        return False
    return True


def refresh_values(gm: GraphModule) -> None:
    """Recompute the fake ``val`` of every call from its inputs'. A rewrite upstream (a fused
    op decomposed into ops with contiguous results) changes the strides its readers see, and
    whether a reshape needs a copy goes by those strides."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        try:
            val = fake_value(node.target, node.args, node.kwargs)
        except Exception:  # an op fake tensors cannot run keeps the value export gave it
            continue
        if val is not None:
            node.meta["val"] = val


class DecomposeReshape(PassBase):
    """Rewrite every ``reshape`` into ``view``, after a ``contiguous`` copy where needed."""

    def call(self, graph_module: GraphModule) -> PassResult:
        if any(is_call(n, RESHAPE) for n in graph_module.graph.nodes):
            refresh_values(graph_module)
        work = [n for n in graph_module.graph.nodes if _reshape(n)]
        for node in work:
            x, shape = node.args[0], list(node.args[1])
            emit = Emitter(graph_module.graph, node)
            if not _viewable(x.meta["val"], shape):
                x = emit(aten.contiguous.default, x)
            node.replace_all_uses_with(emit(aten.view.default, x, shape))
            graph_module.graph.erase_node(node)
        if work:
            finish(graph_module)
        return PassResult(graph_module, bool(work))
