"""Convolutions: conv1d / conv2d (regular, depthwise, grouped), conv_transpose1d / 2d.

# aten::convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride,
#     SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding,
#     SymInt groups) -> Tensor
A conv1d (and a conv_transpose1d) runs as its 2-D form of height 1. Padding that matches TFLite's SAME becomes SAME;
other padding is an explicit PAD with the input's zero point before a VALID conv.
Every form also converts with int16 activations (TFLite's 16x8 CONV_2D, DEPTHWISE_CONV_2D and
TRANSPOSE_CONV, which Vela compiles), with an int64 bias.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from .. import layout
from ..args import bind, shape_of
from ..context import OP, Context, QParams, Value
from ..ops_aliases import aten, at
from ..registry import operator
from ._checks import static_shapes
from .activations import emit_clamp, fused_activation

NHWC = layout.channels_last(4)


def conv_is_1d_or_2d(node: Node, target=None) -> bool:
    """only 1-D and 2-D convolutions are supported"""
    return len(shape_of(node)) in (3, 4)


def weights_are_constant(node: Node, target=None) -> bool:
    """weights must be constant int8 (quantized per channel)"""
    w = node.args[1]
    return isinstance(w, Node) and w.op == "call_function" and "dequantize" in str(w.target)


def transposed_supported(node: Node, target=None) -> bool:
    """transposed convolution must be 1-D or 2-D, ungrouped and without dilation"""
    a = bind(node)
    if not a.transposed:
        return True
    return len(shape_of(node)) in (3, 4) and a.groups == 1 and all(d == 1 for d in a.dilation)


def neutron_weight_volume(node: Node, target=None) -> bool:
    """kernel height * width * ceil(in_channels, num_macs) must be at most the NPU's limit"""
    lim = target.npu.limits if target is not None else None
    if lim is None:
        return True
    w = node.args[1].meta["val"].shape
    kernel = math.prod(w[2:])
    in_ch = w[1] if not bind(node).transposed else w[0]
    return kernel * (math.ceil(in_ch / lim.num_macs) * lim.num_macs) <= lim.max_conv_weight_volume


def neutron_kernel_limits(node: Node, target=None) -> bool:
    """kernel size, stride and dilation must each be at most 4096"""
    if target is None or target.npu.limits is None:
        return True
    a = bind(node)
    lim = target.npu.limits.max_kernel_stride_dilation
    kernel = node.args[1].meta["val"].shape[2:]
    return max([*kernel, *a.stride, *a.dilation]) <= lim


def _same_padding(size: int, k: int, s: int, d: int, p: int, out: int) -> bool:
    """Whether symmetric torch padding ``p`` gives what TFLite SAME padding gives."""
    if out != math.ceil(size / s):
        return False
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2 == p


def _bias(ctx: Context, bias_arg, in_q: QParams, w_q: QParams, channels: int) -> Value:
    scale = np.asarray(in_q.scale[0] * np.asarray(w_q.scale), dtype=np.float64)
    scale = np.broadcast_to(scale, (channels,))
    dtype = np.dtype(np.int64) if in_q.dtype == np.int16 else np.dtype(np.int32)
    info = np.iinfo(dtype)
    q = QParams(tuple(scale), (0,) * channels, int(info.min), int(info.max), 0, dtype)
    if bias_arg is None:
        return ctx.const_value(np.zeros(channels, dtype), q)
    b = ctx.value(bias_arg)
    if b.q is None:
        return ctx.const_value(b.data.astype(np.float64), q)
    if np.allclose(np.broadcast_to(b.q.scale, (channels,)), scale, rtol=1e-6):
        return Value(b.shape, dtype, q, b.perm, data=b.data.astype(dtype))
    # a bias shared by several ops carries one op's scale: requantize it for this one
    real = (b.data.astype(np.float64) - np.asarray(b.q.zero_point)) * np.asarray(b.q.scale)
    return ctx.const_value(real, q)


def _slice_q(q: QParams, lo: int, hi: int) -> QParams:
    if not q.per_channel:
        return q
    return QParams(q.scale[lo:hi], q.zero_point[lo:hi], q.qmin, q.qmax, q.axis, q.dtype)


@operator(
    aten.convolution.default,
    aten={at.conv1d: "conv_linear", at.conv2d: "conv_linear",
          at.conv_transpose1d: "conv_transpose", at.conv_transpose2d: "conv_transpose"},
    checks=(static_shapes, conv_is_1d_or_2d, weights_are_constant, transposed_supported,
            neutron_weight_volume, neutron_kernel_limits),
    int16=True,
)
def convert_convolution(ctx: Context, node: Node) -> None:
    a = bind(node)
    x, w = ctx.value(a.input), ctx.value(a.weight)
    out_node, fused, residual = fused_activation(ctx, node)
    out_q = ctx.output_q(out_node)
    out_shape = shape_of(node)
    is_1d = len(out_shape) == 3
    stride, pad, dil = (list(v) for v in (a.stride, a.padding, a.dilation))
    w_data = w.data
    x_tensor = ctx.tensor(x, layout.channels_last(x.rank))
    if is_1d:  # [N, C, L] -> NHWC [N, 1, L, C]
        n, c, length = x.shape
        x4 = ctx.builder.add_tensor(f"{node.name}/in4d", (n, 1, length, c), x.dtype,
                                    scale=x.q.scale, zero_point=x.q.zero_point)
        ctx.reshape_op(x_tensor, x4, (n, 1, length, c))
        x_tensor, in_shape = x4, (n, c, 1, length)
        w_data = w_data[:, :, None, :]
        stride, pad, dil = [1, *stride], [0, *pad], [1, *dil]
        out4 = (out_shape[0], out_shape[1], 1, out_shape[2])
    else:
        in_shape, out4 = x.shape, out_shape
    w4 = Value(w_data.shape, w.dtype, w.q, layout.identity(4), data=w_data)

    out = ctx.new_value(out_node.name, out4, out_q, NHWC)
    if a.transposed:
        _transpose_conv(ctx, node, x_tensor, x.q, w4, a, out, in_shape)
    else:
        x_tensor, padding = _pad_input(ctx, node, x_tensor, x, in_shape, w4.shape, stride, pad, dil,
                                       out4)
        _conv(ctx, ConvCall(
            node=node, x_tensor=x_tensor, x_q=x.q, in_channels=in_shape[1], weight=w4,
            bias=a.bias, groups=a.groups, out=out, stride=stride, dilation=dil,
            padding=padding,
            fused=fused if residual is None else schema.ActivationFunctionType.NONE))
    if residual is not None:
        clamped = ctx.new_value(out_node.name + "/clamp", out4, out_q, NHWC)
        emit_clamp(ctx, out.tensor, clamped, *residual)
        out = clamped
    if is_1d:
        final = ctx.new_value(out_node.name + "/1d", out_shape, out_q, layout.channels_last(3))
        ctx.reshape_op(out.tensor, final.tensor, ctx.builder.tensor(final.tensor).shape)
        out = final
    ctx.define(node, out)
    ctx.define(out_node, out)


def _pad_input(ctx, node, x_tensor, x, in_shape, w_shape, stride, pad, dil, out4):
    """SAME when torch's padding equals it, else an explicit PAD and VALID."""
    if all(p == 0 for p in pad):
        return x_tensor, schema.Padding.VALID
    if all(
        _same_padding(in_shape[2 + i], w_shape[2 + i], stride[i], dil[i], pad[i], out4[2 + i])
        for i in range(2)
    ):
        return x_tensor, schema.Padding.SAME
    n, c, h, w = in_shape
    padded = (n, h + 2 * pad[0], w + 2 * pad[1], c)
    dst = ctx.builder.add_tensor(f"{node.name}/pad", padded, x.dtype, scale=x.q.scale,
                                 zero_point=x.q.zero_point)
    pads = ctx.int32([[0, 0], [pad[0], pad[0]], [pad[1], pad[1]], [0, 0]])
    ctx.op(OP.PAD, [x_tensor, pads], [dst], schema.PadOptionsT())
    return dst, schema.Padding.VALID


@dataclass(frozen=True, kw_only=True)
class ConvCall:
    """One 2-D convolution to emit: its NHWC input tensor, weights (OIHW), bias argument,
    output value and options."""

    node: Node
    x_tensor: int
    x_q: QParams
    in_channels: int
    weight: Value
    bias: Node | None
    groups: int
    out: Value
    stride: list[int]
    dilation: list[int]
    padding: int
    fused: int


def _conv(ctx: Context, call: ConvCall) -> None:
    w4, out_ch = call.weight, call.weight.shape[0]
    if call.groups == 1:
        _conv2d(ctx, call, call.x_tensor, w4, call.out.tensor,
                _bias(ctx, call.bias, call.x_q, w4.q, out_ch))
    elif call.groups == call.in_channels and w4.shape[1] == 1:
        opts = schema.DepthwiseConv2DOptionsT()
        opts.padding, opts.strideH, opts.strideW = call.padding, *call.stride
        opts.dilationHFactor, opts.dilationWFactor = call.dilation
        opts.depthMultiplier = out_ch // call.in_channels
        opts.fusedActivationFunction = call.fused
        wt = ctx.tensor(w4, (1, 2, 3, 0))  # [O, 1, kH, kW] -> [1, kH, kW, O]
        bias = ctx.tensor(_bias(ctx, call.bias, call.x_q, w4.q, out_ch))
        ctx.op(OP.DEPTHWISE_CONV_2D, [call.x_tensor, wt, bias], [call.out.tensor], opts)
    else:  # grouped: split the channels, one conv per group, concatenate
        _grouped(ctx, call)


def _conv2d(ctx: Context, call: ConvCall, x_tensor: int, w4: Value, out_tensor: int,
            bias: Value) -> None:
    """CONV_2D of ``x_tensor`` with weights ``w4`` and ``bias`` into ``out_tensor``, with the
    options of ``call``."""
    opts = schema.Conv2DOptionsT()
    opts.padding, opts.strideH, opts.strideW = call.padding, *call.stride
    opts.dilationHFactor, opts.dilationWFactor = call.dilation
    opts.fusedActivationFunction = call.fused
    wt = ctx.tensor(w4, NHWC)  # OIHW -> OHWI
    ctx.op(OP.CONV_2D, [x_tensor, wt, ctx.tensor(bias)], [out_tensor], opts)


def _grouped(ctx: Context, call: ConvCall) -> None:
    g, w4, out, x_q = call.groups, call.weight, call.out, call.x_q
    in_g, out_g = call.in_channels // g, w4.shape[0] // g
    x_shape = ctx.builder.tensor(call.x_tensor).shape
    out_shape = ctx.builder.tensor(out.tensor).shape
    name = call.node.name
    pieces = [ctx.builder.add_tensor(f"{name}/in{i}", [*x_shape[:3], in_g], x_q.dtype,
                                     scale=x_q.scale, zero_point=x_q.zero_point) for i in range(g)]
    opts = schema.SplitOptionsT()
    opts.numSplits = g
    ctx.op(OP.SPLIT, [ctx.int32(3), call.x_tensor], pieces, opts)
    full_bias = _bias(ctx, call.bias, x_q, w4.q, w4.shape[0])
    outs = []
    for i in range(g):
        lo, hi = i * out_g, (i + 1) * out_g
        wi = Value((out_g, *w4.shape[1:]), w4.dtype, _slice_q(w4.q, lo, hi), w4.perm,
                   data=w4.data[lo:hi])
        bi = Value((out_g,), full_bias.dtype, _slice_q(full_bias.q, lo, hi), (0,),
                   data=full_bias.data[lo:hi])
        oi = ctx.builder.add_tensor(f"{name}/out{i}", [*out_shape[:3], out_g], out.q.dtype,
                                    scale=out.q.scale, zero_point=out.q.zero_point)
        _conv2d(ctx, call, pieces[i], wi, oi, bi)
        outs.append(oi)
    copts = schema.ConcatenationOptionsT()
    copts.axis = 3
    ctx.op(OP.CONCATENATION, outs, [out.tensor], copts)


def _transpose_conv(ctx, node, x_tensor, x_q, w4: Value, a, out: Value, in_shape):
    """TRANSPOSE_CONV (VALID), then a slice that removes torch's padding."""
    stride = list(a.stride) if len(a.stride) == 2 else [1, *a.stride]
    pad = list(a.padding) if len(a.padding) == 2 else [0, *a.padding]
    out_pad = list(a.output_padding) if len(a.output_padding) == 2 else [0, *a.output_padding]
    kh, kw = w4.shape[2:]
    n, _, h, w = in_shape
    # output_padding rows get only the bias: TFLite fills them when the output is larger
    full = (n, (h - 1) * stride[0] + kh + out_pad[0], (w - 1) * stride[1] + kw + out_pad[1],
            w4.shape[1])
    need_crop = any(pad)
    dst = out.tensor if not need_crop else ctx.builder.add_tensor(
        f"{node.name}/full", full, out.q.dtype, scale=out.q.scale, zero_point=out.q.zero_point)
    # torch weight [I, O, kH, kW] -> TFLite [O, kH, kW, I]; per-channel axis moves with it
    wt = ctx.tensor(w4, (1, 2, 3, 0))
    opts = schema.TransposeConvOptionsT()
    opts.padding, opts.strideH, opts.strideW = schema.Padding.VALID, stride[0], stride[1]
    bias = _bias(ctx, a.bias, x_q, w4.q, w4.shape[1])
    ctx.op(OP.TRANSPOSE_CONV, [ctx.int32(full), wt, x_tensor, ctx.tensor(bias)], [dst], opts)
    if need_crop:
        oshape = ctx.builder.tensor(out.tensor).shape
        begin = [0, pad[0], pad[1], 0]
        ctx.op(OP.SLICE, [dst, ctx.int32(begin), ctx.int32(oshape)], [out.tensor],
               schema.SliceOptionsT())
