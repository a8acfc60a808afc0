"""Pooling: max_pool2d, avg_pool2d, adaptive_avg_pool2d, on batched (N, C, H, W) or unbatched
(C, H, W) inputs, as TFLite NHWC pools.

# aten::max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[],
#     int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)
# aten::avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0,
#     bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None)
TFLite pools need the same input and output quantization; the quantizer shares it.

Padding: PyTorch pads ``padding`` on both sides, and with ``ceil_mode`` its last window may
also overhang the bottom / right edge (``overhang`` below). SAME is used where it places the
same windows; otherwise the input is padded explicitly and pooled VALID. Max pooling pads
with the lowest value of the activations' integer type (int8 or int16), so padding never
wins and every layout is exact. Average pooling pads with zero, which TFLite counts in the
divisor: that equals PyTorch's ``count_include_pad=True`` where no window overhangs (PyTorch
never counts the overhang); TFLite SAME counts only real elements, which equals PyTorch where
it counts no padding.
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
HWC = (1, 2, 0)
"""Layout of an unbatched (C, H, W) tensor with channels last."""


def three_or_four_dims(node: Node, target=None) -> bool:
    """pooling input must be (N, C, H, W) or (C, H, W)"""
    return len(node.args[0].meta["val"].shape) in (3, 4)


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
    h, w = node.args[0].meta["val"].shape[-2:]
    oh, ow = shape_of(node)[-2:]
    return h % oh == 0 and w % ow == 0


def neutron_pool_limits(node: Node, target=None) -> bool:
    """pooling kernel and stride must be at most 4096"""
    if target is None or target.npu.limits is None:
        return True
    a = bind(node)
    sizes = [*pair(getattr(a, "kernel_size", 1)), *pair(getattr(a, "stride", None) or 1)]
    return max(sizes) <= target.npu.limits.max_pool_kernel_stride


class Window:
    """Kernel, stride and PyTorch's padding of one pool node, per spatial axis, with the
    input size and the output size PyTorch gives."""

    def __init__(self, node: Node):
        a = bind(node)
        self.kernel = pair(a.kernel_size)
        self.stride = pair(a.stride) if a.stride else self.kernel
        self.pad = pair(a.padding)
        self.size = tuple(int(d) for d in node.args[0].meta["val"].shape[-2:])
        result = node
        if node.target == aten.max_pool2d_with_indices.default:
            result = next((u for u in node.users if u.args[1] == 0), node)
        val = result.meta["val"]
        val = val[0] if isinstance(val, (list, tuple)) else val
        self.out = tuple(int(d) for d in val.shape[-2:])

    def overhang(self, i: int) -> int:
        """Rows / columns the last window reaches past the padded input (``ceil_mode``)."""
        return max((self.out[i] - 1) * self.stride[i] + self.kernel[i]
                   - self.size[i] - 2 * self.pad[i], 0)

    def same(self) -> bool:
        """Whether TFLite SAME padding places PyTorch's windows."""
        for i in range(2):
            total = (self.out[i] - 1) * self.stride[i] + self.kernel[i] - self.size[i]
            if self.out[i] != -(-self.size[i] // self.stride[i]) or max(total, 0) // 2 != self.pad[i]:
                return False
        return True

    def explicit(self) -> list[list[int]]:
        """(before, after) padding per spatial axis for a VALID pool of PyTorch's windows."""
        return [[self.pad[i], self.pad[i] + self.overhang(i)] for i in range(2)]

    @property
    def padded(self) -> bool:
        return any(self.pad) or any(self.overhang(i) for i in range(2))


def _avg_same(win: Window, count_include_pad: bool) -> bool:
    """SAME averages only real elements: PyTorch's ``count_include_pad=False``, or no
    padding but an overhang, which PyTorch never counts."""
    return win.same() and (not count_include_pad or not any(win.pad))


def avg_padding_expressible(node: Node, target=None) -> bool:
    """padded average pooling must count the padding (count_include_pad) with no window
    overhanging the input (ceil_mode), or place its windows as TFLite SAME padding does"""
    win = Window(node)
    include = bind(node).count_include_pad
    if not win.padded or _avg_same(win, include):
        return True
    return include and not any(win.overhang(i) for i in range(2))


def _nhwc_input(ctx: Context, x: Value) -> int:
    """``x`` as a 4-D NHWC tensor (an unbatched input gets a batch of 1)."""
    if x.rank == 4:
        return ctx.tensor(x, NHWC)
    c, h, w = x.shape
    src = ctx.tensor(x, HWC)
    dst = ctx.builder.add_tensor(f"{ctx.builder.tensor(src).name}/nhwc", (1, h, w, c), x.dtype,
                                 scale=x.q.scale, zero_point=x.q.zero_point)
    ctx.reshape_op(src, dst, (1, h, w, c))
    return dst


def _output(ctx: Context, node: Node, result: Node) -> tuple[Value, int]:
    """The output value of ``result`` laid out channels last, and the 4-D NHWC tensor the
    pool writes (the value's own tensor, or one reshaped into it for an unbatched output)."""
    shape = shape_of(result)
    if len(shape) == 4:
        out = ctx.output_value(result, shape=shape, perm=NHWC)
        return out, out.tensor
    out = ctx.output_value(result, shape=shape, perm=HWC)
    c, h, w = shape
    pooled = ctx.builder.add_tensor(f"{node.name}/nhwc", (1, h, w, c), out.q.dtype,
                                    scale=out.q.scale, zero_point=out.q.zero_point)
    return out, pooled


def _finish(ctx: Context, out: Value, pooled: int) -> None:
    if pooled != out.tensor:
        ctx.reshape_op(pooled, out.tensor, ctx.builder.tensor(out.tensor).shape)


def _pool(ctx: Context, code: int, src: int, dst: int, kernel, stride, padding) -> None:
    opts = schema.Pool2DOptionsT()
    opts.padding = padding
    opts.strideH, opts.strideW = stride
    opts.filterHeight, opts.filterWidth = kernel
    ctx.op(code, [src], [dst], opts)


def _padded(ctx, node, src: int, x: Value, pads, fill: int | None) -> int:
    """NHWC ``src`` padded by ``pads`` ((before, after) for H and W), with the integer
    ``fill`` (None: the zero point)."""
    n, h, w, c = ctx.builder.tensor(src).shape
    shape = (n, h + sum(pads[0]), w + sum(pads[1]), c)
    dst = ctx.builder.add_tensor(f"{node.name}/pad", shape, x.dtype, scale=x.q.scale,
                                 zero_point=x.q.zero_point)
    amounts = ctx.int32([[0, 0], pads[0], pads[1], [0, 0]])
    if fill is None:
        ctx.op(OP.PAD, [src, amounts], [dst], schema.PadOptionsT())
    else:
        value = ctx.tensor(Value((), x.dtype, x.q, (), data=np.array(fill, dtype=x.dtype)))
        ctx.op(OP.PADV2, [src, amounts, value], [dst], schema.PadV2OptionsT())
    return dst


@operator(aten.max_pool2d_with_indices.default, aten.max_pool2d.default,
          aten=(at.max_pool2d,), annotate="shared",
          checks=(static_shapes, three_or_four_dims, no_dilation, indices_unused,
                  neutron_pool_limits), int16=True)
def convert_max_pool(ctx: Context, node: Node) -> None:
    x = ctx.value(node.args[0])
    win = Window(node)
    result = ctx.getitem_users(node).get(0, node) if node.target != aten.max_pool2d.default else node
    out, dst = _output(ctx, node, result)
    src = _nhwc_input(ctx, x)
    mode = schema.Padding.VALID
    if win.padded:
        if win.same():
            mode = schema.Padding.SAME
        else:  # the lowest value, so padding never wins
            src = _padded(ctx, node, src, x, win.explicit(), x.q.qmin)
    _pool(ctx, OP.MAX_POOL_2D, src, dst, win.kernel, win.stride, mode)
    _finish(ctx, out, dst)
    ctx.values[node] = out


@operator(aten.avg_pool2d.default,
          aten=(at.avg_pool2d,), annotate="shared",
          checks=(static_shapes, three_or_four_dims, no_divisor_override,
                  avg_padding_expressible, neutron_pool_limits), int16=True)
def convert_avg_pool(ctx: Context, node: Node) -> None:
    a = bind(node)
    x = ctx.value(a.self)
    win = Window(node)
    out, dst = _output(ctx, node, node)
    src = _nhwc_input(ctx, x)
    mode = schema.Padding.VALID
    if win.padded:
        if _avg_same(win, a.count_include_pad):
            mode = schema.Padding.SAME
        else:
            src = _padded(ctx, node, src, x, win.explicit(), None)
    _pool(ctx, OP.AVERAGE_POOL_2D, src, dst, win.kernel, win.stride, mode)
    _finish(ctx, out, dst)


@operator(aten._adaptive_avg_pool2d.default, aten=(at.adaptive_avg_pool2d,),
          annotate="shared",
          checks=(static_shapes, three_or_four_dims, adaptive_divisible), int16=True)
def convert_adaptive_avg_pool(ctx: Context, node: Node) -> None:
    x = ctx.value(node.args[0])
    out, dst = _output(ctx, node, node)
    h, w = x.shape[-2:]
    oh, ow = shape_of(node)[-2:]
    kernel = (h // oh, w // ow)
    _pool(ctx, OP.AVERAGE_POOL_2D, _nhwc_input(ctx, x), dst, kernel, kernel,
          schema.Padding.VALID)
    _finish(ctx, out, dst)
