"""Activations: relu, relu6 / hardtanh / clamp, leaky_relu, prelu, sigmoid, tanh, hardswish,
silu, gelu, elu (softmax: ``softmax.py``); plus the fused-activation helper conv, linear and add use."""

from __future__ import annotations


import numpy as np
from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from ..args import bind
from ..context import OP, Context, QParams, Value
from ..ops_aliases import aten, at
from ..registry import fused_clamp, operator
from ._checks import max_rank, static_shapes

ACT = schema.ActivationFunctionType
SIGMOID_QPARAMS = (1.0 / 256.0, -128)
"""Output scale and zero point TFLite's int8 LOGISTIC requires."""
CLAMPS = (aten.relu.default, aten.hardtanh.default, aten.clamp.default)


def clamp_bounds(node: Node) -> tuple[float | None, float | None]:
    """(min, max) of a relu / hardtanh / clamp node; None where unbounded."""
    if node.target == aten.relu.default:
        return 0.0, None
    a = bind(node)
    if node.target == aten.hardtanh.default:
        return float(a.min_val), float(a.max_val)
    return (None if a.min is None else float(a.min)), (None if a.max is None else float(a.max))


def _fused_code(lo, hi, q: QParams) -> tuple[int, bool]:
    """(TFLite fused activation, whether an explicit clamp is still needed) for [lo, hi]."""
    qlo = q.qmin if lo is None else int(q.quantize(np.array([lo]))[0])
    qhi = q.qmax if hi is None else int(q.quantize(np.array([hi]))[0])
    if qlo <= q.qmin and qhi >= q.qmax:
        return ACT.NONE, False  # quantization saturation already clamps
    if lo == 0.0 and (hi is None or qhi >= q.qmax):
        return ACT.RELU, False
    if (lo, hi) == (0.0, 6.0):
        return ACT.RELU6, False
    if (lo, hi) == (-1.0, 1.0):
        return ACT.RELU_N1_TO_1, False
    return ACT.NONE, True


def fused_activation(ctx: Context, node: Node) -> tuple[Node, int, tuple | None]:
    """The node whose output the fused op produces, the fused code, and a residual clamp.

    When ``node``'s only user is a clamp (relu, relu6, hardtanh, clamp) the clamp runs inside
    the op; bounds TFLite cannot fuse come back as ``(lo, hi)`` for ``emit_clamp``.
    """
    act = fused_clamp(node, edge=True)
    if act is not None:
        lo, hi = clamp_bounds(act)
        code, residual = _fused_code(lo, hi, ctx.output_q(act))
        return act, code, ((lo, hi) if residual else None)
    return node, ACT.NONE, None


def emit_clamp(ctx: Context, src: int, out: Value, lo, hi) -> None:
    """Clamp ``src`` into ``out`` (same quantization, int8 or int16) with MAXIMUM / MINIMUM."""
    q = out.q
    tensor_shape = ctx.builder.tensor(out.tensor).shape
    cur = src
    for bound, code in ((lo, OP.MAXIMUM), (hi, OP.MINIMUM)):
        if bound is None:
            continue
        last = code == OP.MINIMUM or hi is None
        dst = out.tensor if last else ctx.builder.add_tensor(
            f"{ctx.builder.tensor(out.tensor).name}/lo", tensor_shape, q.dtype,
            scale=q.scale, zero_point=q.zero_point)
        const = ctx.tensor(ctx.const_value(np.array([bound], np.float32), q))
        ctx.op(code, [cur, const], [dst], schema.MaximumMinimumOptionsT())
        cur = dst


@operator(*CLAMPS,
          aten={at.relu: "unary", at.relu_: "unary",  # relu requantizes, the others share
                at.relu6: "shared", at.hardtanh: "shared", at.hardtanh_: "shared",
                at.clamp: "shared", at.clamp_: "shared"},
          checks=(static_shapes,), fuses_into_producer=True, int16=True)
def convert_clamp(ctx: Context, node: Node) -> None:
    """Standalone relu / relu6 / hardtanh / clamp."""
    x = ctx.value(node.args[0])
    out = ctx.output_value(node, perm=x.perm)
    lo, hi = clamp_bounds(node)
    code, residual = _fused_code(lo, hi, out.q)
    if residual:
        emit_clamp(ctx, ctx.tensor(x), out, lo, hi)
        return
    op = {ACT.RELU: OP.RELU, ACT.RELU6: OP.RELU6, ACT.RELU_N1_TO_1: OP.RELU_N1_TO_1}.get(code)
    if op is None:  # the range is wider than the quantized range: a plain requantize
        op = OP.QUANTIZE if not out.q.same_as(x.q) else OP.RESHAPE
    if op == OP.RESHAPE:
        ctx.reshape_op(ctx.tensor(x), out.tensor, ctx.builder.tensor(out.tensor).shape)
    else:
        ctx.op(op, [ctx.tensor(x)], [out.tensor])


def _unary(code: int, options_cls=None):
    def convert(ctx: Context, node: Node) -> None:
        x = ctx.value(node.args[0])
        out = ctx.output_value(node, perm=x.perm)
        ctx.op(code, [ctx.tensor(x)], [out.tensor], options_cls() if options_cls else None)

    return convert


operator(aten.sigmoid.default, aten=(at.sigmoid, at.sigmoid_), annotate="sigmoid",
         checks=(static_shapes,), int16=True)(_unary(OP.LOGISTIC))
# int16 LOGISTIC and TANH (LiteRT: a 256-entry interpolated sigmoid table, tanh(x) =
# 2 sigmoid(2x) - 1) are within 1 and 3 output steps (of 1/32768) of the exact function.
operator(aten.tanh.default, aten=(at.tanh, at.tanh_), annotate="tanh",
         checks=(static_shapes,), int16=True)(_unary(OP.TANH))
operator(aten.hardswish.default, aten=(at.hardswish, at.hardswish_), annotate="unary",
         checks=(static_shapes,), preserve=(at.hardswish.default,),
         )(_unary(OP.HARD_SWISH, schema.HardSwishOptionsT))


# aten::silu(Tensor self) -> Tensor
@operator(aten.silu.default, aten=(at.silu, at.silu_), annotate="unary",
          checks=(static_shapes, max_rank(6)), preserve=(at.silu.default,))
def convert_silu(ctx: Context, node: Node) -> None:
    """silu(x) = x * sigmoid(x), which TFLite has no builtin for: LOGISTIC into the fixed
    sigmoid quantization (scale 1/256, zero point -128, what the int8 kernel requires), then
    MUL by x onto the output's own parameters. Kept whole through decomposition so its two
    halves are not left unquantized; Vela and Neutron take both ops. The int8 gate costs
    under one output step against the float silu of the reference; an int16 gate would
    remove that but doubles the U55 cycles of the op and Neutron runs int8 only."""
    x = ctx.value(node.args[0])
    out = ctx.output_value(node, perm=x.perm)
    scale, zero_point = SIGMOID_QPARAMS
    gate = ctx.builder.add_tensor(f"{node.name}/sigmoid", ctx.builder.tensor(out.tensor).shape,
                                  x.dtype, scale=(scale,), zero_point=(zero_point,))
    src = ctx.tensor(x)
    ctx.op(OP.LOGISTIC, [src], [gate])
    ctx.op(OP.MUL, [src, gate], [out.tensor], schema.MulOptionsT())


def npu_has_gelu(node: Node, target=None) -> bool:
    """no NPU conversion for aten.gelu on this NPU (eIQ Neutron has no GELU operator; Vela
    runs TFLite GELU on the Ethos-U55 and U85 as a lookup table)"""
    return target is None or target.npu.gelu


# aten::gelu(Tensor self, *, str approximate='none') -> Tensor
@operator(aten.gelu.default, aten=(at.gelu, at.gelu_), annotate="unary",
          checks=(static_shapes, npu_has_gelu))
def convert_gelu(ctx: Context, node: Node) -> None:
    """TFLite GELU (exact erf form, or the tanh approximation), a table lookup in int8."""
    x = ctx.value(node.args[0])
    out = ctx.output_value(node, perm=x.perm)
    opts = schema.GeluOptionsT()
    opts.approximate = bind(node).approximate == "tanh"
    ctx.op(OP.GELU, [ctx.tensor(x)], [out.tensor], opts)


@operator(aten.leaky_relu.default, aten=(at.leaky_relu, at.leaky_relu_),
          annotate="unary", checks=(static_shapes,), int16=True)
def convert_leaky_relu(ctx: Context, node: Node) -> None:
    """TFLite LEAKY_RELU (int8 or int16; Vela takes both)."""
    x = ctx.value(node.args[0])
    out = ctx.output_value(node, perm=x.perm)
    opts = schema.LeakyReluOptionsT()
    opts.alpha = float(bind(node).negative_slope)
    ctx.op(OP.LEAKY_RELU, [ctx.tensor(x)], [out.tensor], opts)


@operator(aten._prelu_kernel.default, aten.prelu.default, aten=(at.prelu, at._prelu_kernel),
          annotate="prelu", checks=(static_shapes,), preserve=(at.prelu.default,))
def convert_prelu(ctx: Context, node: Node) -> None:
    """PReLU: the slope is broadcast like a per-channel constant along dim 1."""
    x = ctx.value(node.args[0])
    slope = ctx.value(node.args[1])
    out = ctx.output_value(node, perm=x.perm)
    data = slope.data.reshape(-1)
    full = [1] * x.rank
    if data.size > 1:
        full[1] = data.size
    alpha = Value(tuple(full), slope.dtype, slope.q, tuple(range(x.rank)), data=data.reshape(full))
    # TFLite broadcasts the slope from the trailing axes; drop leading unit axes.
    tensor = ctx.tensor(alpha, x.perm)
    ctx.op(OP.PRELU, [ctx.tensor(x), tensor], [out.tensor])


def elu_is_plain(node: Node, target=None) -> bool:
    """elu must have alpha 1, scale 1 and input_scale 1 (TFLite ELU has no parameters)"""
    a = bind(node)
    return float(a.alpha) == 1.0 and float(a.scale) == 1.0 and float(a.input_scale) == 1.0


# aten::elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor
@operator(aten.elu.default, aten=(at.elu, at.elu_), annotate="unary",
          checks=(static_shapes, elu_is_plain))
def convert_elu(ctx: Context, node: Node) -> None:
    """elu(x) = max(x, exp(min(x, 0)) - 1), since exp(t) - 1 >= t: MINIMUM, EXP, ADD and
    MAXIMUM, which LiteRT's reference kernels, Vela (U55, U85) and Neutron all run (TFLite's
    own ELU has no reference kernel, so the host could not check it). EXP rounds to 1/255
    on [0, 1]: within one output step of the exact function where the output spans at
    least 1 (its step at least 1/255), as an ELU after a normalisation does."""
    x = ctx.value(node.args[0])
    out = ctx.output_value(node, perm=x.perm)
    shape, name = ctx.builder.tensor(out.tensor).shape, node.name
    src = ctx.tensor(x)

    def tensor(suffix: str, q: QParams) -> int:
        return ctx.builder.add_tensor(f"{name}/{suffix}", shape, x.dtype, scale=q.scale,
                                      zero_point=q.zero_point)

    neg = tensor("min0", x.q)  # exact: 0 is the zero point
    ctx.op(OP.MINIMUM, [src, ctx.tensor(ctx.const_value(np.zeros(1, np.float32), x.q))], [neg],
           schema.MaximumMinimumOptionsT())
    exp_q = QParams((1.0 / 255.0,), (x.q.qmin,), x.q.qmin, x.q.qmax)  # [0, 1]
    e = tensor("exp", exp_q)
    ctx.op(OP.EXP, [neg], [e], schema.ExpOptionsT())
    minus_one = QParams((1.0 / 128.0,), (0,), x.q.qmin, x.q.qmax)
    expm1 = tensor("expm1", out.q)
    ctx.op(OP.ADD, [e, ctx.tensor(ctx.const_value(np.array([-1.0], np.float32), minus_one))],
           [expm1], schema.AddOptionsT())
    x_out = tensor("x", out.q)
    ctx.op(OP.QUANTIZE, [src], [x_out])
    ctx.op(OP.MAXIMUM, [x_out, expm1], [out.tensor], schema.MaximumMinimumOptionsT())
