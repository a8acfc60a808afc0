"""DecomposeGroupNorm: group and instance normalization as the means and elementwise ops NPUs
run.

Before::

    y = group_norm(x, G, weight, bias, eps)      # x: (N, C, *spatial); instance_norm: G = C

After (``Cg = C / G``, ``S``: the product of the spatial sizes)::

    g = view(x, (N, G, Cg, S))
    m = mean(mean(g, 3, keepdim=True), 2, keepdim=True)          # (N, G, 1, 1)
    d = g - m
    v = mean(mean(d * d, 3, keepdim=True), 2, keepdim=True)
    r = rsqrt(v + eps)
    y = view(d * (r * weight_g) + bias_g, x.shape)                 # weight_g: (G, Cg, 1)

A mean over a group's channels is taken only when a group has more than one (not for
instance normalization). On an NPU tensor laid out channels last, ``(N, G, Cg, S)`` is the
same bytes as ``(N, S, G, Cg)``: the views move no data, the first mean reduces the spatial
axis (a height) and the second a group's channels (a width of a reshape), which is how NPUs
reduce; one mean over both would be a reduction over depth, which Vela refuses. The per-channel
weight multiplies the per-group ``r`` (a small tensor), so the full-size ops are the four of
layer normalization: ``g - m``, ``d * d``, ``d * r`` and ``+ bias``. Each op gets its own int8
parameters from calibration (see ``DecomposeLayerNorm``); ``eps`` is kept and the means of
equal-sized parts equal the mean of the whole, so the float rewrite is exact.

``instance_norm`` is rewritten when it normalizes with the input's statistics (no running
statistics used, as in ``InstanceNorm2d``'s default).
"""

from __future__ import annotations

import math
import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.graph.schema import bind
from mcu_npu.passes.aten._recurrent import (Emitter, constant_attr, finish, is_call,
                                           replace_by_first_output, static_shape)

aten = torch.ops.aten
GROUP_NORM = aten.group_norm.default
NATIVE_GROUP_NORM = aten.native_group_norm.default
INSTANCE_NORM = aten.instance_norm.default


def _groups(node: Node) -> int | None:
    """The group count of a normalization this pass rewrites, None for any other node."""
    if not (is_call(node, GROUP_NORM) or is_call(node, NATIVE_GROUP_NORM)
            or is_call(node, INSTANCE_NORM)):
        return None
    a = bind(node)
    try:
        shape = static_shape(a.input)
    except Exception:
        return None
    if len(shape) < 3 or not a.input.meta["val"].dtype.is_floating_point:
        return None
    if node.target == INSTANCE_NORM:
        return shape[1] if a.use_input_stats else None
    if node.target == NATIVE_GROUP_NORM and any(
            u.target is not operator.getitem or (u.args[1] != 0 and u.users) for u in node.users):
        return None  # its mean or rstd is read
    return int(a.group) if node.target == NATIVE_GROUP_NORM else int(a.num_groups)


def _grouped(gm: GraphModule, emit: Emitter, node: Node, param, name: str, shape) -> Node:
    """Per-channel ``param`` as a ``shape`` (``(G, Cg, 1)``) constant (a view if computed)."""
    if param.op == "get_attr":
        value = operator.attrgetter(param.target)(gm).detach().reshape(shape)
        return constant_attr(gm, node, f"{node.name}_{name}", value)
    return emit(aten.view.default, param, list(shape))


def _mean(emit: Emitter, x: Node, cg: int) -> Node:
    """Mean over the spatial axis, then over a group's channels when there are several."""
    m = emit(aten.mean.dim, x, [3], True)
    return emit(aten.mean.dim, m, [2], True) if cg > 1 else m


def _decompose(gm: GraphModule, node: Node) -> Node:
    a = bind(node)
    x = a.input
    shape = static_shape(x)
    n, c = shape[0], shape[1]
    g = _groups(node)
    cg, s = c // g, math.prod(shape[2:])
    emit = Emitter(gm.graph, node)
    xg = emit(aten.view.default, x, [n, g, cg, s])
    d = emit(aten.sub.Tensor, xg, _mean(emit, xg, cg))
    v = _mean(emit, emit(aten.mul.Tensor, d, d), cg)
    r = emit(aten.rsqrt.default, emit(aten.add.Tensor, v, float(a.eps)))
    if a.weight is not None:
        r = emit(aten.mul.Tensor, r, _grouped(gm, emit, node, a.weight, "weight", (g, cg, 1)))
    y = emit(aten.mul.Tensor, d, r)
    if a.bias is not None:
        y = emit(aten.add.Tensor, y, _grouped(gm, emit, node, a.bias, "bias", (g, cg, 1)))
    return emit(aten.view.default, y, list(shape))


class DecomposeGroupNorm(PassBase):
    """Rewrite every ``group_norm`` (``native_group_norm`` whose statistics are unused) and
    every ``instance_norm`` on input statistics, over static shapes of rank 3 or more, into
    views, means, sub / mul / add and rsqrt."""

    def call(self, graph_module: GraphModule) -> PassResult:
        work = [n for n in graph_module.graph.nodes if _groups(n) is not None]
        for node in work:
            replace_by_first_output(graph_module, node, _decompose(graph_module, node),
                                    node.target == NATIVE_GROUP_NORM)
        if work:
            graph_module.graph.eliminate_dead_code()
            finish(graph_module)
        return PassResult(graph_module, bool(work))
