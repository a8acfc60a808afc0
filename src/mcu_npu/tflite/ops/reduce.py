"""Reductions: mean over dims (MEAN, which requantizes; axes mapped through the layout).

# aten::mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)
Ethos-U reduces over height and width of a batch of one; over depth only when height or
width is 1 (Vela: "Reduction over depth is only supported if any of h,w,c == 1"). A mean
whose reduced axes lie elsewhere in memory (a channels-first input, e.g. a partition input
in PyTorch's NCHW order, the last axis of a 3-D tensor, or any axes of a batch of several)
but are contiguous there runs as the MEAN over the width of a [1, outer, reduced, inner]
view of the same bytes: reshapes only, no transpose.
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
    opts = schema.ReducerOptionsT()
    width = _as_width(tshape, axes)
    if width is None:
        opts.keepDims = bool(a.keepdim)
        ctx.op(OP.MEAN, [src, ctx.int32(axes)], [out.tensor], opts)
        return
    outer, reduced, inner = width
    q = dict(scale=x.q.scale, zero_point=x.q.zero_point)
    view = ctx.builder.add_tensor(f"{node.name}/as_width", (1, outer, reduced, inner), x.dtype,
                                  **q)
    ctx.reshape_op(src, view, (1, outer, reduced, inner))
    out_shape = list(ctx.builder.tensor(out.tensor).shape)
    mean = out.tensor if out_shape == [1, outer, 1, inner] else ctx.builder.add_tensor(
        f"{node.name}/mean", (1, outer, 1, inner), out.q.dtype, scale=out.q.scale,
        zero_point=out.q.zero_point)
    opts.keepDims = True
    ctx.op(OP.MEAN, [view, ctx.int32([2])], [mean], opts)
    if mean != out.tensor:
        ctx.reshape_op(mean, out.tensor, out_shape)
