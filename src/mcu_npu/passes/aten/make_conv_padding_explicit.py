"""MakeConvPaddingExplicit: a convolution padded by mode (``padding="same"`` or ``"valid"``)
becomes one with explicit padding before quantization.

Before::

    y = conv1d(x, w, b, stride=1, padding="same", dilation=d)     # kernel k, even: k - 1 odd

After::

    y = conv1d(constant_pad_nd(x, [0, 1]), w, b, 1, padding=[d * (k - 1) // 2], dilation=d)

PyTorch pads ``d * (k - 1)`` in total along each spatial axis, half before and the rest
after; an even kernel pads one more after than before. Core-ATen decomposition turns the
``.padding`` overload into that pad and a plain convolution only after quantization, so the
pad would run unquantized between two quantized ops and the convolution would follow it off
the NPU. Rewritten first, the odd element is a quantized pad (the input's parameters, zero
at its zero point) that runs on the NPU with the convolution. Exact in float.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, replace_nodes
from ...graph.schema import bind

aten = torch.ops.aten

_EXPLICIT = {aten.conv1d.padding: aten.conv1d.default, aten.conv2d.padding: aten.conv2d.default}


def _padded_by_mode(node: Node) -> bool:
    return node.op == "call_function" and node.target in _EXPLICIT \
        and "val" in node.args[1].meta


def _explicit(graph_module: GraphModule, node: Node) -> Node:
    a = bind(node)
    x, w, bias, stride, mode, dilation, groups = (a.input, a.weight, a.bias, a.stride, a.padding,
                                                  a.dilation, a.groups)
    kernel = tuple(w.meta["val"].shape[2:])
    dilation = [dilation] * len(kernel) if isinstance(dilation, int) else list(dilation)
    stride = [stride] * len(kernel) if isinstance(stride, int) else list(stride)
    totals = [d * (k - 1) for d, k in zip(dilation, kernel)] if mode == "same" \
        else [0] * len(kernel)
    before = [t // 2 for t in totals]
    extra = [t - 2 * b for t, b in zip(totals, before)]  # 0 or 1, after
    emit = Emitter(graph_module.graph, node)
    if any(extra):
        pads = []
        for e in reversed(extra):  # constant_pad_nd lists (before, after) from the last axis
            pads += [0, e]
        x = emit(aten.constant_pad_nd.default, x, pads, 0.0)
    return emit(_EXPLICIT[node.target], x, w, bias, stride, before, dilation, groups)


class MakeConvPaddingExplicit(PassBase):
    """Rewrite every ``conv1d`` / ``conv2d`` padded by mode into explicit padding."""

    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module, replace_nodes(graph_module, _padded_by_mode, _explicit))
