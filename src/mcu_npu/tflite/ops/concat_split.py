"""cat, slice, select and split along any axis (mapped through the value's layout).

A slice read only by further slices or selects is not emitted: it stays a window of its
input, and the slices reading it become one STRIDED_SLICE of that input. One slice per read
is what Vela folds into the consumer's addressing; a slice of a slice costs it a copy.

# aten::cat(Tensor[] tensors, int dim=0)
# aten::slice_copy.Tensor(Tensor self, int dim=0, SymInt? start, SymInt? end, SymInt step=1)
# aten::split_with_sizes_copy(Tensor self, SymInt[] split_sizes, int dim=0) -> Tensor[]
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from .. import layout
from ..args import bind, shape_of
from ..context import OP, Context, Value, _is, window
from ..ops_aliases import DEQUANTIZE, QUANTIZE, aten, at
from ..registry import operator
from ._checks import static_shapes
from .shape import reshape


@operator(aten.cat.default, aten=(at.cat, at.concat, at.concatenate), annotate="cat",
          checks=(static_shapes,), int16=True)
def convert_cat(ctx: Context, node: Node) -> None:
    a = bind(node)
    values = [ctx.value(t) for t in a.tensors]
    values = [v for v in values if 0 not in v.shape]
    lead = next((v for v in values if not v.is_const), values[0])
    out = ctx.output_value(node, perm=lead.perm)
    opts = schema.ConcatenationOptionsT()
    opts.axis = lead.perm.index(a.dim % lead.rank)
    inputs = []
    for v in values:
        if v.is_const and v.q is not None and not v.q.same_as(out.q):
            v = ctx.const_value(
                (v.data.astype(np.float32) - v.q.zero_point[0]) * v.q.scale[0], out.q)
        inputs.append(ctx.tensor(v, lead.perm))
    ctx.op(OP.CONCATENATION, inputs, [out.tensor], opts)


def _base(x: Value) -> tuple[Value, tuple[int, ...]]:
    """The emitted value ``x`` is a window of, and the window's offsets."""
    return x.view if x.view is not None else (x, (0,) * x.rank)


def _slice(ctx: Context, name: str, x: Value, dim: int, start: int, end: int, step: int,
           q) -> Value:
    shape = list(x.shape)
    shape[dim] = len(range(start, end, step))
    out = ctx.new_value(name, shape, q, x.perm)
    base, offsets = _base(x)
    src = ctx.tensor(base)
    begin, stop = window(base, offsets, x.shape, ctx.builder.tensor(src).shape)
    strides = [1] * x.rank
    axis = x.perm.index(dim)
    begin[axis], stop[axis], strides[axis] = offsets[dim] + start, offsets[dim] + end, step
    ctx.op(OP.STRIDED_SLICE, [src, ctx.int32(begin), ctx.int32(stop), ctx.int32(strides)],
           [out.tensor], schema.StridedSliceOptionsT())
    return out


def _read_by_slices_only(node: Node) -> bool:
    """Every reader of ``node`` (through its quantize / dequantize) is a slice or select."""
    readers, todo = [], list(node.users)
    while todo:
        u = todo.pop()
        if _is(u, QUANTIZE + DEQUANTIZE):
            todo.extend(u.users)
        else:
            readers.append(u)
    return bool(readers) and all(_is(u, (aten.slice_copy.Tensor, aten.select_copy.int))
                                 for u in readers)


def _lazy_slice(x: Value, dim: int, start: int, end: int, q) -> Value:
    """A window of ``x`` that emits nothing until something other than a slice reads it."""
    base, offsets = _base(x)
    shape = list(x.shape)
    shape[dim] = end - start
    offsets = list(offsets)
    offsets[dim] += start
    return Value(tuple(shape), x.dtype, q, x.perm, view=(base, tuple(offsets)))


def _bounds(size: int, start, end, step) -> tuple[int, int, int]:
    return slice(start, end, step).indices(size)


@operator(aten.slice_copy.Tensor, aten=(at.slice,), annotate="shared",
          checks=(static_shapes,), int16=True)
def convert_slice(ctx: Context, node: Node) -> None:
    a = bind(node)
    x = ctx.value(a.self)
    dim = a.dim % x.rank
    start, end, step = _bounds(x.shape[dim], a.start, a.end, a.step)
    if x.is_const:
        idx = [slice(None)] * x.rank
        idx[dim] = slice(start, end, step)
        data = x.data[tuple(idx)]
        ctx.define(node, Value(data.shape, x.dtype, x.q, layout.identity(x.rank), data=data))
        return
    q = ctx.output_q(node)
    if step == 1 and end > start and q.same_as(x.q) and _read_by_slices_only(node):
        ctx.define(node, _lazy_slice(x, dim, start, end, q))
        return
    ctx.define(node, _slice(ctx, node.name, x, dim, start, end, step, q))


@operator(aten.select_copy.int, aten=(at.select,), annotate="shared",
          checks=(static_shapes,), int16=True)
def convert_select(ctx: Context, node: Node) -> None:
    """select = a one-wide slice, then the axis is dropped by a reshape."""
    a = bind(node)
    x = ctx.value(a.self)
    dim, index = a.dim % x.rank, a.index % x.shape[a.dim % x.rank]
    if x.is_const:
        data = np.take(x.data, index, axis=dim)
        ctx.define(node, Value(data.shape, x.dtype, x.q, layout.identity(data.ndim), data=data))
        return
    part = _slice(ctx, node.name + "/slice", x, dim, index, index + 1, 1, ctx.output_q(node))
    ctx.define(node, reshape(ctx, node, part, shape_of(node)))


@operator(aten.split_with_sizes_copy.default, aten.split_copy.Tensor,
          aten=(at.split, at.split_with_sizes, at.chunk, at.unbind),
          annotate="split",
          checks=(static_shapes,), int16=True)
def convert_split(ctx: Context, node: Node) -> None:
    """SPLIT_V along the mapped axis; each getitem of the result is one output."""
    a = bind(node)
    x = ctx.value(a.self)
    dim = a.dim % x.rank
    sizes = [int(v.shape[dim]) for v in node.meta["val"]]
    items = ctx.getitem_users(node)
    outs = []
    for i, size in enumerate(sizes):
        shape = list(x.shape)
        shape[dim] = size
        user = items.get(i)
        q = ctx.output_q(user) if user is not None and user.users else x.q
        v = ctx.new_value(f"{node.name}/{i}", shape, q, x.perm)
        outs.append(v)
        if user is not None:
            ctx.define(user, v)
    opts = schema.SplitVOptionsT()
    opts.numSplits = len(sizes)
    ctx.op(OP.SPLIT_V, [ctx.tensor(x), ctx.int32(sizes), ctx.int32(x.perm.index(dim))],
           [v.tensor for v in outs], opts)
    ctx.values[node] = outs[0]
