"""ConvertBatchNormToDepthwise: an inference BatchNorm nothing folds becomes a 1x1 depthwise
convolution, which every NPU runs (TFLite has no batch-norm operator).

Before::

    y = batch_norm(x, w, b, mean, var, training=False, eps=eps)     # x: (N, C, ...)

After::

    scale = w / sqrt(var + eps)          # computed here, in float64, stored as constants
    shift = b - mean * scale
    y = conv2d(x, scale.reshape(C, 1, 1, 1), shift, groups=C)      # x: (N, C, H, W)
    y = conv1d(x, scale.reshape(C, 1, 1), shift, groups=C)         # x: (N, C, L)
    y = view(conv1d(view(x, (N, C, 1)), ...), (N, C))              # x: (N, C)

A BatchNorm that reads a convolution, or a linear layer on a 2-D input, is left alone:
``prepare_pt2e`` folds it into that layer's weights (torchao's ``_fuse_conv_bn_`` and
``_fuse_linear_bn_``). So is a training-mode BatchNorm (batch statistics) and one whose
statistics or affine parameters are not constants of the graph. The depthwise weights are
quantized per channel like any convolution's, so each channel's scale is exact in int8.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import (Emitter, constant_attr, finish,
                                           replace_by_first_output)

aten = torch.ops.aten

# layers whose following BatchNorm ``prepare_pt2e`` folds into their weights
_FOLDED_INTO = {aten.conv1d.default, aten.conv1d.padding, aten.conv2d.default,
                aten.conv2d.padding, aten.conv3d.default, aten.conv3d.padding,
                aten.conv_transpose1d.default, aten.conv_transpose2d.input,
                aten.conv_transpose3d.input}


class ConvertBatchNormToDepthwise(PassBase):
    """Replace every inference ``batch_norm`` of a 2-, 3- or 4-D tensor that no convolution
    or linear layer absorbs by a per-channel 1x1 depthwise convolution."""

    def call(self, graph_module: GraphModule) -> PassResult:
        found = []
        for node in list(graph_module.graph.nodes):
            bn = _BatchNorm.of(node, graph_module)  # read now: an earlier rewrite may feed it
            if bn is None:
                continue
            found.append(node)
            replace_by_first_output(graph_module, node, bn.emit(graph_module, node),
                                    node.target != aten.batch_norm.default)
        if found:
            graph_module.graph.eliminate_dead_code()
            finish(graph_module)
        return PassResult(graph_module, bool(found))


class _BatchNorm:
    """An inference BatchNorm's input and its per-channel scale and shift."""

    def __init__(self, x: Node, scale: torch.Tensor, shift: torch.Tensor):
        self.x, self.scale, self.shift = x, scale, shift

    @classmethod
    def of(cls, node: Node, gm: GraphModule) -> "_BatchNorm | None":
        """The BatchNorm ``node`` is, when this pass rewrites it."""
        if node.op != "call_function":
            return None
        if node.target == aten.batch_norm.default:
            x, w, b, mean, var, training, _, eps = node.args[:8]
            if training:
                return None
        elif node.target == aten._native_batch_norm_legit_no_training.default:
            x, w, b, mean, var, _, eps = node.args[:7]
            if any(u.target is not operator.getitem or (u.args[1] != 0 and u.users)
                   for u in node.users):
                return None
        else:
            return None
        val = x.meta.get("val") if isinstance(x, Node) else None
        if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point or \
                val.dim() not in (2, 3, 4) or not all(isinstance(d, int) for d in val.shape):
            return None
        if _folded_by_prepare(x):
            return None
        consts = [_constant(p, gm) for p in (w, b, mean, var)]
        if consts[2] is None or consts[3] is None or \
                any(c is None for c, p in zip(consts, (w, b)) if p is not None):
            return None
        channels = val.shape[1]
        weight, bias, mean_v, var_v = (c.double() if c is not None else None for c in consts)
        scale = (weight if weight is not None else torch.ones(channels, dtype=torch.float64)) \
            / torch.sqrt(var_v + eps)
        shift = (bias if bias is not None else torch.zeros(channels, dtype=torch.float64)) \
            - mean_v * scale
        return cls(x, scale.to(val.dtype), shift.to(val.dtype))

    def emit(self, gm: GraphModule, node: Node) -> Node:
        """The depthwise convolution, inserted before ``node``."""
        emit = Emitter(gm.graph, node)
        shape = list(self.x.meta["val"].shape)
        channels = shape[1]
        x = self.x if len(shape) > 2 else emit(aten.view.default, self.x, shape + [1])
        spatial = max(len(shape) - 2, 1)
        weight = constant_attr(gm, node, f"{node.name}_depthwise_weight",
                       self.scale.reshape([channels, 1] + [1] * spatial))
        bias = constant_attr(gm, node, f"{node.name}_depthwise_bias", self.shift)
        conv = aten.conv2d.default if spatial == 2 else aten.conv1d.default
        out = emit(conv, x, weight, bias, [1] * spatial, [0] * spatial, [1] * spatial,
                   channels)
        return out if len(shape) > 2 else emit(aten.view.default, out, shape)


def _folded_by_prepare(x: Node) -> bool:
    """``prepare_pt2e`` folds a BatchNorm reading ``x`` into the layer that makes ``x``."""
    if x.op != "call_function":
        return False
    if x.target in _FOLDED_INTO:
        return True
    if x.target == aten.linear.default:
        val = x.args[0].meta.get("val") if isinstance(x.args[0], Node) else None
        return not isinstance(val, torch.Tensor) or val.dim() <= 2
    return False


def _constant(node, gm: GraphModule) -> torch.Tensor | None:
    """The tensor a ``get_attr`` node names; None for anything computed in the graph."""
    if not isinstance(node, Node) or node.op != "get_attr":
        return None
    value = operator.attrgetter(node.target)(gm)
    return value.detach() if isinstance(value, torch.Tensor) else None
