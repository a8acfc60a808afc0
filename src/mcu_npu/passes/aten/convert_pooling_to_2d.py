"""ConvertPoolingTo2d: 1-D pooling, adaptive max pooling and max over time or space as the 2-D
pools NPUs run.

Spellings accepted (x: (N, C, L) for the 1-D forms, (N, C, H, W) for the 2-D ones)::

    max_pool1d(x, k, s, p, d, ceil)       -> squeeze(max_pool2d(unsqueeze(x, -2), (1, k), (1, s),
                                                                (0, p), (1, d), ceil), -2)
    avg_pool1d(x, k, s, p, ceil, count)   -> the same with avg_pool2d
    adaptive_avg_pool1d(x, o)             -> squeeze(adaptive_avg_pool2d(unsqueeze(x, -2),
                                                                  (1, o)), -2)
    adaptive_max_pool1d(x, o)[0]          -> max_pool1d's form with k = s = L / o
    adaptive_max_pool2d(x, (oh, ow))[0]   -> max_pool2d(x, (H / oh, W / ow))
    amax(x, dims, keepdim)                -> a max_pool2d whose window covers ``dims``, then a
    max(x, dim, keepdim)[0]                  squeeze of them unless ``keepdim``

``dims`` must be trailing axes: the last of a 3-D tensor (max over time), or the height and/or
width of a 4-D one (global max pooling). TFLite has no 1-D pool and no adaptive max pool, and
ATen has no max pool over a whole axis: left as they are, these run as float kernels on the
CPU (``max_pool1d`` is decomposed only after quantization, where its pieces sit between one
quantize / dequantize pair). On a tensor laid out channels last, ``(N, C, 1, L)`` is the same
bytes as ``(N, C, L)``: the views move no data. An adaptive max pool whose input is not a
multiple of its output, and an index output that is read, are left alone (they stay on the
CPU, with the reason). Every rewrite is exact.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.graph.schema import bind
from mcu_npu.passes.aten._recurrent import Emitter, finish, replace_by_first_output

aten = torch.ops.aten

_TUPLE_OUTPUT = (aten.adaptive_max_pool1d.default, aten.adaptive_max_pool2d.default,
                 aten.max.dim)


def _shape(node) -> tuple | None:
    val = node.meta.get("val") if isinstance(node, Node) else None
    if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in val.shape):
        return None
    return tuple(val.shape)


def _values_only(node: Node) -> bool:
    """Only item 0 (the values) of a (values, indices) node is read."""
    return all(u.op == "call_function" and u.target is operator.getitem
               and (u.args[1] == 0 or not u.users) for u in node.users)


def _axes(dims, rank: int) -> list[int] | None:
    """``dims`` made non-negative, when they are trailing spatial axes a 2-D pool covers."""
    if isinstance(dims, int):
        dims = [dims]
    if not dims:
        return None
    axes = sorted({d % rank for d in dims})
    spatial = [rank - 1] if rank == 3 else [2, 3]
    return axes if rank in (3, 4) and all(a in spatial for a in axes) else None


def _window(node: Node) -> tuple | None:
    """(op, pool arguments, axes of the 4-D pool output squeezed after it) of the 2-D pool
    ``node`` becomes (a 3-D input gets a unit height first), or None to leave it alone."""
    shape = _shape(node.args[0]) if node.args else None
    if shape is None:
        return None
    a, rank = bind(node), len(shape)
    t = node.target
    if t in (aten.max_pool1d.default, aten.avg_pool1d.default) and rank == 3:
        stride = list(a.stride) if a.stride else list(a.kernel_size)
        pad = [0, a.padding[0]]
        if t == aten.max_pool1d.default:
            args = ([1, a.kernel_size[0]], [1, stride[0]], pad, [1, a.dilation[0]], a.ceil_mode)
            return aten.max_pool2d.default, args, [2]
        args = ([1, a.kernel_size[0]], [1, stride[0]], pad, a.ceil_mode, a.count_include_pad)
        return aten.avg_pool2d.default, args, [2]
    if t == aten.adaptive_avg_pool1d.default and rank == 3:
        return aten.adaptive_avg_pool2d.default, ([1, a.output_size[0]],), [2]
    if t in _TUPLE_OUTPUT and not _values_only(node):
        return None
    if t == aten.adaptive_max_pool1d.default and rank == 3:
        if shape[2] % a.output_size[0]:
            return None
        k = shape[2] // a.output_size[0]
        return aten.max_pool2d.default, ([1, k], [1, k]), [2]
    if t == aten.adaptive_max_pool2d.default and rank == 4:
        (h, w), (oh, ow) = shape[2:], a.output_size
        if h % oh or w % ow:
            return None
        return aten.max_pool2d.default, ([h // oh, w // ow], [h // oh, w // ow]), []
    if t in (aten.amax.default, aten.max.dim):
        axes = _axes(a.dim, rank)
        if axes is None:
            return None
        kernel = [1, shape[2]] if rank == 3 else [shape[2] if 2 in axes else 1,
                                                   shape[3] if 3 in axes else 1]
        if rank == 3:
            return aten.max_pool2d.default, (kernel, kernel), [2] if a.keepdim else [2, 3]
        return aten.max_pool2d.default, (kernel, kernel), [] if a.keepdim else axes
    return None


def _rewrite(gm: GraphModule, node: Node, window: tuple) -> None:
    op, args, squeeze = window
    x = node.args[0]
    emit = Emitter(gm.graph, node)
    src = emit(aten.unsqueeze.default, x, 2) if len(_shape(x)) == 3 else x
    out = emit(op, src, *args)
    if squeeze:
        out = emit(aten.squeeze.dims, out, squeeze)
    replace_by_first_output(gm, node, out, items=node.target in _TUPLE_OUTPUT)


class ConvertPoolingTo2d(PassBase):
    """Rewrite 1-D pools, adaptive max pools and max reductions over trailing axes into 2-D
    pools (see the module docstring for the spellings)."""

    def call(self, graph_module: GraphModule) -> PassResult:
        work = [(n, w) for n in graph_module.graph.nodes
                if n.op == "call_function" and (w := _window(n)) is not None]
        for node, window in work:
            _rewrite(graph_module, node, window)
        if work:
            finish(graph_module)
        return PassResult(graph_module, bool(work))
