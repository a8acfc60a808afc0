"""Pooling: max_pool2d, avg_pool2d, adaptive_avg_pool2d (NHWC, kernel = stride windows).

# aten::max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[],
#     int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)
# aten::avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0,
#     bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None)
TFLite pools need the same input and output quantization; the quantizer shares it.
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from .. import layout
from ..args import bind, pair, shape_of
from ..context import OP, Context, Value
from ..ops_aliases import aten, at
from ..registry import operator
from ._checks import static_shapes

NHWC = layout.channels_last(4)


def four_dims(node: Node, target=None) -> bool:
    """pooling input must be 4-D (N, C, H, W)"""
    return len(node.args[0].meta["val"].shape) == 4


def no_ceil_mode(node: Node, target=None) -> bool:
    """ceil_mode is not supported"""
    return not bind(node).ceil_mode


def no_dilation(node: Node, target=None) -> bool:
    """pooling dilation must be 1"""
    return all(d == 1 for d in pair(bind(node).dilation))


def indices_unused(node: Node, target=None) -> bool:
    """the indices output of max_pool2d must be unused"""
    return all(u.args[1] == 0 for u in node.users)


def no_divisor_override(node: Node, target=None) -> bool:
    """divisor_override is not supported"""
    return bind(node).divisor_override is None


def adaptive_divisible(node: Node, target=None) -> bool:
    """input height and width must be multiples of the output size"""
    h, w = node.args[0].meta["val"].shape[2:]
    oh, ow = shape_of(node)[2:]
    return h % oh == 0 and w % ow == 0


def neutron_pool_limits(node: Node, target=None) -> bool:
    """pooling kernel and stride must be at most 4096"""
    if target is None or target.npu.limits is None:
        return True
    a = bind(node)
    sizes = [*pair(getattr(a, "kernel_size", 1)), *pair(getattr(a, "stride", None) or 1)]
    return max(sizes) <= target.npu.limits.max_pool_kernel_stride


def _pool(ctx: Context, code: int, src: int, out: Value, kernel, stride, padding) -> None:
    opts = schema.Pool2DOptionsT()
    opts.padding = padding
    opts.strideH, opts.strideW = stride
    opts.filterHeight, opts.filterWidth = kernel
    ctx.op(code, [src], [out.tensor], opts)


def _padded_input(ctx, node, x: Value, pad, fill: float | None) -> int:
    """NHWC input with ``pad`` rows / cols added on each side, filled with ``fill`` (int8)."""
    n, c, h, w = x.shape
    shape = (n, h + 2 * pad[0], w + 2 * pad[1], c)
    dst = ctx.builder.add_tensor(f"{node.name}/pad", shape, x.dtype, scale=x.q.scale,
                                 zero_point=x.q.zero_point)
    pads = ctx.int32([[0, 0], [pad[0], pad[0]], [pad[1], pad[1]], [0, 0]])
    if fill is None:
        ctx.op(OP.PAD, [ctx.tensor(x, NHWC), pads], [dst], schema.PadOptionsT())
    else:
        value = ctx.tensor(Value((), x.dtype, x.q, (), data=np.array(fill, dtype=x.dtype)))
        ctx.op(OP.PADV2, [ctx.tensor(x, NHWC), pads, value], [dst], schema.PadV2OptionsT())
    return dst


def _same(size, k, s, p, out) -> bool:
    return out == -(-size // s) and max((out - 1) * s + k - size, 0) // 2 == p


def _padding_mode(x: Value, kernel, stride, pad, out_shape) -> int | None:
    if not any(pad):
        return schema.Padding.VALID
    if all(_same(x.shape[2 + i], kernel[i], stride[i], pad[i], out_shape[2 + i]) for i in range(2)):
        return schema.Padding.SAME
    return None


@operator(aten.max_pool2d_with_indices.default, aten.max_pool2d.default,
          aten=(at.max_pool2d,), annotate="shared",
          checks=(static_shapes, four_dims, no_ceil_mode, no_dilation, indices_unused,
                  neutron_pool_limits))
def convert_max_pool(ctx: Context, node: Node) -> None:
    a = bind(node)
    x = ctx.value(a.self)
    kernel = pair(a.kernel_size)
    stride = pair(a.stride) if a.stride else kernel
    pad = pair(a.padding)
    result = ctx.getitem_users(node).get(0, node) if node.target != aten.max_pool2d.default else node
    out_shape = shape_of(result)
    out = ctx.output_value(result, shape=out_shape, perm=NHWC)
    mode = _padding_mode(x, kernel, stride, pad, out_shape)
    src = ctx.tensor(x, NHWC)
    if mode is None:  # max pool pads with the lowest value so padding never wins
        src, mode = _padded_input(ctx, node, x, pad, x.q.qmin), schema.Padding.VALID
    _pool(ctx, OP.MAX_POOL_2D, src, out, kernel, stride, mode)
    ctx.values[node] = out


@operator(aten.avg_pool2d.default,
          aten=(at.avg_pool2d,), annotate="shared",
          checks=(static_shapes, four_dims, no_ceil_mode, no_divisor_override,
                  neutron_pool_limits))
def convert_avg_pool(ctx: Context, node: Node) -> None:
    a = bind(node)
    x = ctx.value(a.self)
    kernel = pair(a.kernel_size)
    stride = pair(a.stride) if a.stride else kernel
    pad = pair(a.padding)
    out = ctx.output_value(node, perm=NHWC)
    mode = _padding_mode(x, kernel, stride, pad, shape_of(node))
    src = ctx.tensor(x, NHWC)
    # TFLite SAME averages only real elements: that is count_include_pad=False
    if mode is None or (mode == schema.Padding.SAME and a.count_include_pad):
        src, mode = _padded_input(ctx, node, x, pad, None), schema.Padding.VALID
    _pool(ctx, OP.AVERAGE_POOL_2D, src, out, kernel, stride, mode)


@operator(aten._adaptive_avg_pool2d.default, aten=(at.adaptive_avg_pool2d,),
          annotate="shared",
          checks=(static_shapes, four_dims, adaptive_divisible))
def convert_adaptive_avg_pool(ctx: Context, node: Node) -> None:
    x = ctx.value(node.args[0])
    out = ctx.output_value(node, perm=NHWC)
    h, w = x.shape[2:]
    oh, ow = shape_of(node)[2:]
    kernel = (h // oh, w // ow)
    _pool(ctx, OP.AVERAGE_POOL_2D, ctx.tensor(x, NHWC), out, kernel, kernel, schema.Padding.VALID)
