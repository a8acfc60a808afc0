"""FoldInputNormalisation: a declared input's normalising 1x1 layer (``flow.front``) folds
into the convolution that reads it, where that is exact.

Before::

    n = conv2d(x, reshape(norm_weight_0, [C, 1, 1, 1]), norm_bias_0, groups=C)  # w*x + b
    y = conv2d(n, W, B, stride, padding)

After::

    y = conv2d(x, W * w[None, :, None, None], B + sum(W * b[None, :, None, None]), ...)

Exact in float when the convolution pads nothing (every tap reads ``w * x + b``), or when
``b`` is zero (a scaling: a padded zero scales to zero). A padded convolution after a
shift (``b`` not zero) is left alone: its zero padding pads the normalised input, which is
``x = -b / w`` raw, not zero. The convolution must be the layer's only reader, ungrouped,
with parameter weights. On an NPU this removes a layer that passes over the whole input
(on the Ethos-U55 the 1x1 depthwise layer costs about as much as the first convolution).
"""

from __future__ import annotations

import re

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from ...upstream.private import detect_fake_mode


aten = torch.ops.aten

_CONVS = (aten.conv1d.default, aten.conv2d.default)
_NORM = re.compile(r"norm_(weight|bias)_(\d+)$")


def _attr(gm: GraphModule, node) -> torch.Tensor | None:
    if not isinstance(node, Node) or node.op != "get_attr":
        return None
    value = gm
    for part in node.target.split("."):
        value = getattr(value, part, None)
    return value if isinstance(value, torch.Tensor) else None


def _norm_attr(node, kind: str) -> Node | None:
    """The ``norm_<kind>_<i>`` get_attr ``node`` is (or reshapes), else None."""
    if isinstance(node, Node) and node.op == "call_function" \
            and node.target in (aten.reshape.default, aten.view.default):
        node = node.args[0]
    if isinstance(node, Node) and node.op == "get_attr":
        m = _NORM.match(node.target)
        if m and m.group(1) == kind:
            return node
    return None


def _arg(node: Node, i: int, default):
    return node.args[i] if len(node.args) > i else default


class FoldInputNormalisation(PassBase):
    """Fold each front normalisation conv into its reading convolution where exact."""

    def call(self, gm: GraphModule) -> PassResult:
        changed = False
        for norm in list(gm.graph.nodes):
            if norm.op == "call_function" and norm.target in _CONVS:
                changed |= self._fold(gm, norm)
        if changed:
            gm.graph.eliminate_dead_code()
            gm.recompile()
        return PassResult(gm, changed)

    def _fold(self, gm: GraphModule, norm: Node) -> bool:
        w_node, b_node = _norm_attr(norm.args[1], "weight"), _norm_attr(_arg(norm, 2, None),
                                                                        "bias")
        if w_node is None or b_node is None or len(norm.users) != 1:
            return False
        conv = next(iter(norm.users))
        if conv.op != "call_function" or conv.target != norm.target or conv.args[0] is not norm \
                or _arg(conv, 6, 1) != 1 or norm in conv.args[1:]:
            return False
        weight, bias = _attr(gm, conv.args[1]), _attr(gm, _arg(conv, 2, None))
        if weight is None or (_arg(conv, 2, None) is not None and bias is None):
            return False
        scale, shift = _attr(gm, w_node).detach(), _attr(gm, b_node).detach()
        padding = _arg(conv, 4, [0] * (weight.dim() - 2))
        padded = padding if isinstance(padding, (list, tuple)) else [padding]
        if any(int(p) != 0 for p in padded) and bool((shift != 0).any()):
            return False  # zero padding of w*x + b is not w*(zero padding of x) + b
        view = (1, -1, *([1] * (weight.dim() - 2)))
        with torch.no_grad():
            w = weight.detach().double()
            new_w = (w * scale.double().reshape(view)).to(weight.dtype)
            moved = (w * shift.double().reshape(view)).sum(dim=tuple(range(1, w.dim())))
            base = bias.detach().double() if bias is not None else torch.zeros_like(moved)
            new_b = (base + moved).to(weight.dtype)
        index = _NORM.match(w_node.target).group(2)
        names = (f"_mcu_npu_folded_norm_weight_{index}", f"_mcu_npu_folded_norm_bias_{index}")
        gm.register_parameter(names[0], torch.nn.Parameter(new_w, weight.requires_grad))
        gm.register_parameter(names[1], torch.nn.Parameter(new_b, weight.requires_grad))
        with gm.graph.inserting_before(conv):
            w_attr, b_attr = gm.graph.get_attr(names[0]), gm.graph.get_attr(names[1])
        mode = detect_fake_mode([n.meta["val"] for n in gm.graph.nodes
                                 if isinstance(n.meta.get("val"), torch.Tensor)])
        for attr, value in ((w_attr, new_w), (b_attr, new_b)):
            attr.meta["val"] = mode.from_tensor(value, static_shapes=True) if mode is not None \
                else value
        args = list(conv.args) + [None] * max(0, 3 - len(conv.args))
        args[0], args[1], args[2] = norm.args[0], w_attr, b_attr
        conv.args = tuple(args)
        return True
