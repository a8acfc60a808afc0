"""Matrix products: linear, addmm and mm with constant weights (FULLY_CONNECTED), and
mm / bmm between activations (BATCH_MATMUL).

# aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1)
# aten::linear(Tensor input, Tensor weight, Tensor? bias=None)
# aten::mm(Tensor self, Tensor mat2) ; aten::bmm(Tensor self, Tensor mat2)
"""

from __future__ import annotations

from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from .. import layout
from ..args import bind, shape_of
from ..context import OP, Context, Value
from ..registry import operator
from ..ops_aliases import aten, at
from ._checks import static_shapes
from .activations import emit_clamp, fused_activation
from .conv import _bias


def scalars_are_one(node: Node, target=None) -> bool:
    """alpha and beta must be 1"""
    a = bind(node)
    return getattr(a, "alpha", 1) == 1 and getattr(a, "beta", 1) == 1


def batch_matmul_rank(node: Node, target=None) -> bool:
    """matrix products between activations need rank 2 or 3 operands"""
    return all(len(arg.meta["val"].shape) in (2, 3) for arg in node.args[:2])


def _fully_connected(ctx: Context, node: Node, x: Value, w_oi: Value, bias_arg) -> None:
    """FULLY_CONNECTED with weights ``w_oi`` given in [out, in] logical layout."""
    out_node, fused, residual = fused_activation(ctx, node)
    out_shape = shape_of(node)
    out = ctx.new_value(out_node.name, out_shape, ctx.output_q(out_node))
    opts = schema.FullyConnectedOptionsT()
    opts.keepNumDims = len(out_shape) > 2
    opts.fusedActivationFunction = fused if residual is None else 0
    bias = _bias(ctx, bias_arg, x.q, w_oi.q, w_oi.shape[0])
    target = out.tensor
    if residual is not None:
        target = ctx.builder.add_tensor(out_node.name + "/fc", ctx.builder.tensor(out.tensor).shape,
                                        out.q.dtype, scale=out.q.scale, zero_point=out.q.zero_point)
    ctx.op(OP.FULLY_CONNECTED, [ctx.tensor(x, layout.identity(x.rank)), ctx.tensor(w_oi),
                                ctx.tensor(bias)], [target], opts)
    if residual is not None:
        emit_clamp(ctx, target, out, *residual)
    ctx.define(node, out)
    ctx.define(out_node, out)


def _transposed(w: Value) -> Value:
    """The constant ``w`` ([in, out] after a permute) seen as [out, in]."""
    q = w.q
    if q is not None and q.per_channel:
        q = type(q)(q.scale, q.zero_point, q.qmin, q.qmax, 1 - q.axis, q.dtype)
    return Value(w.shape[::-1], w.dtype, q, (0, 1), data=w.data.T.copy())


@operator(aten.linear.default, aten=(at.linear,), annotate="conv_linear",
          preserve=(at.linear.default,), checks=(static_shapes,), int16=True)
def convert_linear(ctx: Context, node: Node) -> None:
    a = bind(node)
    w = ctx.value(a.weight)
    if not w.is_const:
        raise NotImplementedError("linear with a non-constant weight")
    _fully_connected(ctx, node, ctx.value(a.input), w, a.bias)


@operator(aten.addmm.default, checks=(static_shapes, scalars_are_one))
def convert_addmm(ctx: Context, node: Node) -> None:
    a = bind(node)
    w = ctx.value(a.mat2)
    if not w.is_const:
        raise NotImplementedError("addmm with a non-constant mat2")
    _fully_connected(ctx, node, ctx.value(a.mat1), _transposed(w), a.self)


@operator(aten.mm.default, aten.bmm.default, aten=(at.mm, at.bmm, at.matmul),
          annotate="binary",
          checks=(static_shapes, batch_matmul_rank))
def convert_matmul(ctx: Context, node: Node) -> None:
    lhs, rhs = ctx.value(node.args[0]), ctx.value(node.args[1])
    if rhs.is_const and rhs.rank == 2 and node.target == aten.mm.default:
        _fully_connected(ctx, node, lhs, _transposed(rhs), None)
        return
    out = ctx.output_value(node)
    opts = schema.BatchMatMulOptionsT()
    opts.adjX = opts.adjY = False
    ctx.op(OP.BATCH_MATMUL, [ctx.tensor(lhs, layout.identity(lhs.rank)),
                             ctx.tensor(rhs, layout.identity(rhs.rank))], [out.tensor], opts)
