"""Binary arithmetic: add, sub, mul (tensor or scalar operands, with broadcasting).

# aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
A scalar or constant operand becomes a constant of the activations' integer type: int8
quantized so that a scalar is exact (a tensor over its range), or, beside int16 activations,
int16 symmetric with zero point 0, as TFLite's 16x8 ADD / SUB / MUL require of both inputs.
Operands of lower rank are given leading unit axes, then laid out like the output.
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from .. import layout
from ..args import shape_of
from ..context import OP, Context, QParams, Value
from ..ops_aliases import aten, at
from ..registry import operator
from ._checks import alpha_is_one, max_rank, static_shapes
from .activations import emit_clamp, fused_activation

BINARY = {
    aten.add.Tensor: (OP.ADD, schema.AddOptionsT),
    aten.sub.Tensor: (OP.SUB, schema.SubOptionsT),
    aten.mul.Tensor: (OP.MUL, schema.MulOptionsT),
    aten.add.Scalar: (OP.ADD, schema.AddOptionsT),
    aten.sub.Scalar: (OP.SUB, schema.SubOptionsT),
    aten.mul.Scalar: (OP.MUL, schema.MulOptionsT),
}


INT16 = np.dtype(np.int16)


def exact_scalar(value: float, dtype=np.int8) -> Value:
    """A constant of integer type ``dtype`` (int8 or int16) holding ``value`` exactly:
    scale |value| / qmax, zero point 0."""
    dtype = np.dtype(dtype)
    top = int(np.iinfo(dtype).max)
    scale = abs(float(value)) / top or 1.0
    q = QParams((scale,), (0,), -top - 1, top, 0, dtype)
    data = np.array(top if value > 0 else (-top if value < 0 else 0), dtype=dtype)
    return Value((), dtype, q, (), data=data)


def _symmetric_int16(ctx: Context, real: np.ndarray) -> Value:
    """``real`` as an int16 constant, symmetric with zero point 0 (scale max|real| / 32767)."""
    top = int(np.iinfo(np.int16).max)
    scale = max(float(np.abs(real).max()), 1e-8) / top
    return ctx.const_value(real.astype(np.float32), QParams((scale,), (0,), -top - 1, top, 0,
                                                            INT16))


def _real(v: Value) -> np.ndarray:
    """The real values of constant ``v`` (dequantized when it is quantized)."""
    if v.q is None:
        return v.data.astype(np.float64)
    scale, zero = np.asarray(v.q.scale), np.asarray(v.q.zero_point)
    if v.q.per_channel:
        shape = [1] * v.rank
        shape[v.q.axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (v.data.astype(np.float64) - zero) * scale


def _operand(ctx: Context, arg, dtype: np.dtype) -> Value:
    """The value of operand ``arg``; a constant one in the activations' type ``dtype``."""
    if not isinstance(arg, Node):
        return exact_scalar(arg, dtype)
    v = ctx.value(arg)
    if not v.is_const:
        return v
    if v.q is None and v.data.size == 1:  # a lifted scalar
        return exact_scalar(float(v.data.reshape(-1)[0]), dtype)
    if dtype == INT16:
        return v if v.q is not None and v.q.dtype == INT16 and not v.q.per_channel and \
            v.q.zero_point == (0,) else _symmetric_int16(ctx, _real(v))
    if v.q is None:  # unquantized constant operand: int8 over its range
        lo, hi = min(float(v.data.min()), 0.0), max(float(v.data.max()), 0.0)
        scale = max(hi - lo, 1e-8) / 255.0
        q = QParams((scale,), (int(round(-128 - lo / scale)),))
        return ctx.const_value(v.data.astype(np.float32), q)
    return v


def _activation_dtype(ctx: Context, node: Node) -> np.dtype:
    """The integer type of ``node``'s activations: its tensor operands' (its output's when
    both operands are constant)."""
    for arg in node.args[:2]:
        if isinstance(arg, Node):
            v = ctx.value(arg)
            if not v.is_const and v.q is not None:
                return v.q.dtype
    return ctx.output_q(node).dtype


def _expand_rank(ctx: Context, v: Value, rank: int) -> Value:
    """``v`` with leading unit axes so that it has ``rank`` axes (no data moves)."""
    if v.rank == rank:
        return v
    shape = (1,) * (rank - v.rank) + tuple(v.shape)
    if v.is_const:
        q = v.q
        if q is not None and q.per_channel:
            q = QParams(q.scale, q.zero_point, q.qmin, q.qmax, q.axis + rank - v.rank, q.dtype)
        return Value(shape, v.dtype, q, layout.identity(rank), data=v.data.reshape(shape))
    out = ctx.new_value(f"{ctx.builder.tensor(ctx.tensor(v)).name}/rank{rank}", shape, v.q)
    ctx.reshape_op(ctx.tensor(v, layout.identity(v.rank)), out.tensor, shape)
    return out


@operator(*BINARY, aten=(at.add, at.add_, at.sub, at.sub_, at.mul, at.mul_),
          annotate="binary",
          checks=(static_shapes, alpha_is_one, max_rank(6)), int16=True)
def convert_binary(ctx: Context, node: Node) -> None:
    code, options_cls = BINARY[node.target]
    out_shape = shape_of(node)
    rank = len(out_shape)
    dtype = _activation_dtype(ctx, node)
    operands = [_operand(ctx, a, dtype) for a in node.args[:2]]
    tensors = [v for v in operands if not v.is_const and v.rank == rank]
    perm = tensors[0].perm if tensors else layout.identity(rank)
    operands = [_expand_rank(ctx, v, rank) for v in operands]
    out_node, fused, residual = fused_activation(ctx, node)
    if code != OP.ADD:
        out_node, fused, residual = node, 0, None
    out = ctx.new_value(out_node.name, out_shape, ctx.output_q(out_node), perm)
    opts = options_cls()
    opts.fusedActivationFunction = fused if residual is None else 0
    if code != OP.MUL:  # TFLite's general int16 rescaling, not its power-of-two-scales path
        opts.potScaleInt16 = False
    target = out.tensor
    if residual is not None:
        target = ctx.builder.add_tensor(out_node.name + "/pre", ctx.builder.tensor(out.tensor).shape,
                                        out.q.dtype, scale=out.q.scale, zero_point=out.q.zero_point)
    ctx.op(code, [ctx.tensor(v, perm) for v in operands], [target], opts)
    if residual is not None:
        emit_clamp(ctx, target, out, *residual)
    ctx.define(node, out)
    ctx.define(out_node, out)
