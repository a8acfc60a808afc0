"""cat, slice, select and split along any axis (mapped through the value's layout).

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
from ..context import OP, Context, Value
from ..ops_aliases import aten
from ..registry import converts
from ._checks import static_shapes
from .shape import reshape


@converts(aten.cat.default, checks=(static_shapes,))
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


def _slice(ctx: Context, name: str, x: Value, dim: int, start: int, end: int, step: int,
           q) -> Value:
    shape = list(x.shape)
    shape[dim] = len(range(start, end, step))
    out = ctx.new_value(name, shape, q, x.perm)
    axis = x.perm.index(dim)
    tshape = ctx.builder.tensor(ctx.tensor(x)).shape
    begin, stop, strides = [0] * x.rank, list(tshape), [1] * x.rank
    begin[axis], stop[axis], strides[axis] = start, end, step
    ctx.op(OP.STRIDED_SLICE, [ctx.tensor(x), ctx.int32(begin), ctx.int32(stop), ctx.int32(strides)],
           [out.tensor], schema.StridedSliceOptionsT())
    return out


def _bounds(size: int, start, end, step) -> tuple[int, int, int]:
    return slice(start, end, step).indices(size)


@converts(aten.slice_copy.Tensor, checks=(static_shapes,))
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
    ctx.define(node, _slice(ctx, node.name, x, dim, start, end, step, ctx.output_q(node)))


@converts(aten.select_copy.int, checks=(static_shapes,))
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


@converts(aten.split_with_sizes_copy.default, aten.split_copy.Tensor, checks=(static_shapes,))
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
