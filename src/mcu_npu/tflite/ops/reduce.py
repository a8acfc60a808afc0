"""Reductions: mean over dims (MEAN, which requantizes; axes mapped through the layout).

# aten::mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)
Ethos-U reduces over height and width of a batch of one; over depth only when height or
width is 1 (Vela: "Reduction over depth is only supported if any of h,w,c == 1"). A mean
whose reduced axes lie elsewhere in memory (a channels-first input, e.g. a partition input
in PyTorch's NCHW order, the last axis of a 3-D tensor, or any axes of a batch of several)
but are contiguous there runs as the MEAN over the width of a [1, outer, reduced, inner]
view of the same bytes: reshapes only, no transpose.

Vela makes a MEAN a depthwise convolution over the reduced window whose weights, all ones,
take window x depth bytes of the payload (DS-CNN's global mean over 25x5x64: 8,000 bytes
before encoding). For the Ethos-U (``NpuSpec.compact_means``) a mean over the height and / or
width of a [1, H, W, C] tensor whose output keeps its input's quantization is an
AVERAGE_POOL_2D (no weights; TFLite pools need equal quantization); another mean over the
leading axes of a tensor runs as the MEAN over the height of the ``[1, reduced, C, 1]`` view
of the same bytes: depth 1, so ``reduced`` bytes of weights.
"""

from __future__ import annotations

import math

from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from ..args import bind
from ..context import OP, Context
from ..ops_aliases import aten, at
from ..registry import operator
from ._checks import static_shapes

MAX_REDUCED_WIDTH = 64 * 64
"""Largest reduced width Vela's MEAN takes."""
MAX_MEAN_HEIGHT = 64
"""Rows one of the depthwise convolutions Vela makes of a MEAN reduces."""
MAX_POOL_HEIGHT, MAX_POOL_WINDOW = 256, 256 * 256
"""Vela's VALID average pooling limits: window height, and height x width."""
MAX_TENSOR_DIM = 65535
"""Largest tensor dimension Vela takes (the column view's width holds all kept elements)."""
MAX_COLUMN_CONVS = 4
"""Most convolutions (each with an ADD after the first) a column mean may cost."""
MIN_SAVED_PER_CONV = 1024
"""Weight bytes (before encoding) the column view must save per convolution: each costs
100-250 command bytes. Measured with Vela 5.2 on conv 1x1 + ReLU + mean, payload bytes
column - plain on the U55-128 / U85-256: 64x25x5 -1,280 / -832; 32x12x12 -384 / -48;
24x8x8 -96 / -176; 24x10x10 -192 / +32; 16x8x8 -64 / 0; 16x12x12 0 / +384 (2,160 bytes
saved for 3 convolutions: left plain); 16x16x16 -352 / +96 (left plain)."""


def _spatial(tshape, axes) -> bool:
    """Whether ``axes`` of a TFLite tensor of shape ``tshape`` are among the height and width
    of its 4-D (NHWC) form, and that form has a batch of one (Vela's MEAN takes no other)."""
    lead = 4 - len(tshape)
    return lead >= 0 and all(a + lead in (1, 2) for a in axes) and \
        (lead > 0 or tshape[0] == 1)


def _as_width(tshape, axes) -> tuple[int, int, int] | None:
    """``(outer, reduced, inner)`` sizes when ``axes`` are contiguous, not already spatial and
    small enough to be reduced as a width; None otherwise."""
    if _spatial(tshape, axes) or axes != list(range(axes[0], axes[-1] + 1)):
        return None
    reduced = math.prod(tshape[axes[0]:axes[-1] + 1])
    if reduced > MAX_REDUCED_WIDTH:
        return None
    return math.prod(tshape[:axes[0]]), reduced, math.prod(tshape[axes[-1] + 1:])


def _as_column(tshape, axes) -> tuple[int, int, int, int] | None:
    """The ``[1, reduced, inner, 1]`` view in which the mean runs over the height, when the
    reduced axes are contiguous and lead the tensor (only ones before them), Vela splits the
    height into at most ``MAX_COLUMN_CONVS`` convolutions, and the weights the view saves
    (``reduced x (inner - 1)`` bytes before encoding) are worth them."""
    if axes != list(range(axes[0], axes[-1] + 1)) or math.prod(tshape[:axes[0]]) != 1:
        return None
    reduced, inner = math.prod(tshape[axes[0]:axes[-1] + 1]), math.prod(tshape[axes[-1] + 1:])
    convs = -(-reduced // MAX_MEAN_HEIGHT)
    if inner > MAX_TENSOR_DIM or convs > MAX_COLUMN_CONVS or \
            reduced * (inner - 1) < MIN_SAVED_PER_CONV * convs:
        return None
    return 1, reduced, inner, 1


def _compact(ctx: Context) -> bool:
    return ctx.target is not None and ctx.target.npu.compact_means


def _pool_window(tshape, axes) -> tuple[int, int] | None:
    """The (height, width) window of an AVERAGE_POOL_2D taking the mean over ``axes`` of a
    [1, H, W, C] tensor, when ``axes`` are among H and W and the window is one Vela pools
    (VALID padding: height at most 256, height x width at most 65,536)."""
    if len(tshape) != 4 or tshape[0] != 1 or not set(axes) <= {1, 2}:
        return None
    kh, kw = (tshape[1] if 1 in axes else 1), (tshape[2] if 2 in axes else 1)
    if kh > MAX_POOL_HEIGHT or kh * kw > MAX_POOL_WINDOW:
        return None
    return kh, kw


def _average_pool(ctx: Context, node: Node, src: int, out, window) -> None:
    """The mean as a VALID AVERAGE_POOL_2D of stride 1 (one window per output element), then
    a reshape to the output's shape where it has fewer axes."""
    _, h, w, c = ctx.builder.tensor(src).shape
    pooled_shape = [1, h - window[0] + 1, w - window[1] + 1, c]
    out_shape = list(ctx.builder.tensor(out.tensor).shape)
    pooled = out.tensor if out_shape == pooled_shape else ctx.builder.add_tensor(
        f"{node.name}/pooled", pooled_shape, out.q.dtype, scale=out.q.scale,
        zero_point=out.q.zero_point)
    opts = schema.Pool2DOptionsT()
    opts.padding = schema.Padding.VALID
    opts.strideH = opts.strideW = 1
    opts.filterHeight, opts.filterWidth = window
    ctx.op(OP.AVERAGE_POOL_2D, [src], [pooled], opts)
    if pooled != out.tensor:
        ctx.reshape_op(pooled, out.tensor, out_shape)


def _view(ctx: Context, tshape, axes) -> tuple[tuple[int, ...], int] | None:
    """(4-D view of the same bytes, the one axis its MEAN reduces), or None to reduce
    ``axes`` of the tensor itself: the column view where the target asks for it, else the
    width view of reduced axes that are not spatial."""
    if _compact(ctx):
        column = _as_column(tshape, axes)
        if column is not None:
            return column, 1
    width = _as_width(tshape, axes)
    return None if width is None else ((1, *width), 2)


MAX_INT16_MEAN = 2**16
"""Elements an int16 MEAN may reduce: Vela's ``mean_kernel_product_int16``."""


def int16_mean_fits(node: Node) -> bool:
    """An int16 mean reduces at most 65,536 elements (Vela's 16x8 MEAN)."""
    a = bind(node)
    shape = node.args[0].meta["val"].shape
    dims = {d % len(shape) for d in (a.dim if a.dim else range(len(shape)))}
    return math.prod(int(shape[d]) for d in dims) <= MAX_INT16_MEAN


@operator(aten.mean.dim, aten=(at.mean,), annotate="unary",
          checks=(static_shapes,), int16=int16_mean_fits)
def convert_mean(ctx: Context, node: Node) -> None:
    a = bind(node)
    x = ctx.value(a.self)
    dims = sorted({d % x.rank for d in (a.dim if a.dim else range(x.rank))})
    if a.keepdim:
        perm = x.perm
    else:
        kept = [d for d in range(x.rank) if d not in dims]
        perm = tuple(kept.index(d) for d in x.perm if d in kept)
    out = ctx.output_value(node, perm=perm)
    axes = sorted(x.perm.index(d) for d in dims)
    src = ctx.tensor(x)
    tshape = list(ctx.builder.tensor(src).shape)
    if _compact(ctx) and out.q.same_as(x.q):
        window = _pool_window(tshape, axes)
        if window is not None:
            _average_pool(ctx, node, src, out, window)
            return
    opts = schema.ReducerOptionsT()
    found = _view(ctx, tshape, axes)
    if found is None:
        opts.keepDims = bool(a.keepdim)
        ctx.op(OP.MEAN, [src, ctx.int32(axes)], [out.tensor], opts)
        return
    view, axis = found
    kept = tuple(1 if i == axis else d for i, d in enumerate(view))
    as_view = ctx.builder.add_tensor(f"{node.name}/as_view", view, x.dtype,
                                     scale=x.q.scale, zero_point=x.q.zero_point)
    ctx.reshape_op(src, as_view, view)
    out_shape = list(ctx.builder.tensor(out.tensor).shape)
    mean = out.tensor if out_shape == list(kept) else ctx.builder.add_tensor(
        f"{node.name}/mean", kept, out.q.dtype, scale=out.q.scale,
        zero_point=out.q.zero_point)
    opts.keepDims = True
    ctx.op(OP.MEAN, [as_view, ctx.int32([axis])], [mean], opts)
    if mean != out.tensor:
        ctx.reshape_op(mean, out.tensor, out_shape)
