"""Layout and shape ops: view / reshape / flatten, squeeze / unsqueeze, permute / transpose,
clone and dim-order copies.

Most of these emit nothing: a permute only changes the value's recorded layout, a squeeze of
a unit axis keeps the same tensor, a clone aliases its input. On constants they fold.
"""

from __future__ import annotations

import numpy as np
from torch.fx import Node

from .. import layout
from ..args import bind, shape_of
from ..context import Context, QParams, Value
from ..ops_aliases import aten, at, dim_order
from ..registry import operator
from ._checks import static_shapes


def _alias(value: Value, shape, perm, tensor: int | None = None) -> Value:
    """A value sharing ``value``'s TFLite tensor (or ``tensor``) under another shape/layout."""
    tensor = value.tensor if tensor is None else tensor
    v = Value(tuple(shape), value.dtype, value.q, tuple(perm), tensor=tensor)
    v._layouts[tuple(perm)] = tensor
    return v


def reshape(ctx: Context, node: Node, x: Value, out_shape) -> Value:
    """``x`` viewed with ``out_shape``: an alias, a RESHAPE, or a TRANSPOSE then RESHAPE."""
    out_shape = tuple(int(d) for d in out_shape)
    if x.is_const:
        return Value(out_shape, x.dtype, x.q, layout.identity(len(out_shape)),
                     data=x.data.reshape(out_shape))
    perm = layout.reshape_layout(x.shape, x.perm, out_shape)
    if perm is None:
        perm = layout.identity(len(out_shape))
        ident = layout.identity(x.rank)
        src = x.tensor if layout.same_memory_order(x.shape, x.perm, ident) else ctx.tensor(x, ident)
    else:
        src = x.tensor
    tflite_shape = layout.permute_shape(out_shape, perm)
    if list(tflite_shape) == list(ctx.builder.tensor(src).shape):
        return _alias(x, out_shape, perm, tensor=src)
    out = ctx.new_value(node.name, out_shape, x.q, perm)
    ctx.reshape_op(src, out.tensor, tflite_shape)
    return out


@operator(aten.view_copy.default, aten.squeeze_copy.dims, aten.squeeze_copy.dim,
          aten.squeeze_copy.default, aten.unsqueeze_copy.default, aten.alias_copy.default,
          aten=(at.view, at.reshape, at.flatten, at.unflatten, at.squeeze, at.unsqueeze),
          annotate="shared",
          checks=(static_shapes,), int16=True)
def convert_view(ctx: Context, node: Node) -> None:
    ctx.define(node, reshape(ctx, node, ctx.value(node.args[0]), shape_of(node)))


@operator(aten.clone.default, dim_order._clone_dim_order.default,
          dim_order._to_dim_order_copy.default, aten=(at.clone, at.contiguous, at.dropout),
          annotate="shared",
          checks=(static_shapes,), int16=True)
def convert_clone(ctx: Context, node: Node) -> None:
    """Copies and dim-order changes: the TFLite tensor already has the layout it needs."""
    x = ctx.value(node.args[0])
    ctx.define(node, x)


@operator(aten.permute_copy.default, aten=(at.permute, at.transpose, at.t),
          annotate="shared",
          checks=(static_shapes,), int16=True)
def convert_permute(ctx: Context, node: Node) -> None:
    """No data moves: the output is the same tensor with a composed layout."""
    x = ctx.value(node.args[0])
    p = [d % x.rank for d in bind(node).dims]
    if x.is_const:
        q = x.q
        if q is not None and q.per_channel:
            q = QParams(q.scale, q.zero_point, q.qmin, q.qmax, p.index(q.axis), q.dtype)
        ctx.define(node, Value(tuple(x.shape[d] for d in p), x.dtype, q, layout.identity(x.rank),
                               data=np.transpose(x.data, p).copy()))
        return
    perm = tuple(p.index(d) for d in x.perm)
    ctx.define(node, _alias(x, tuple(x.shape[d] for d in p), perm))
