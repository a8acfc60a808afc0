"""Reductions: mean over dims (MEAN, which requantizes; axes mapped through the layout).

# aten::mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)
"""

from __future__ import annotations

from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from ..args import bind
from ..context import OP, Context
from ..ops_aliases import aten, at
from ..registry import operator
from ._checks import static_shapes


@operator(aten.mean.dim, aten=(at.mean,), annotate="unary",
          checks=(static_shapes,))
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
    opts = schema.ReducerOptionsT()
    opts.keepDims = bool(a.keepdim)
    axes = ctx.int32(sorted(x.perm.index(d) for d in dims))
    ctx.op(OP.MEAN, [ctx.tensor(x), axes], [out.tensor], opts)
