"""Normalization: the reciprocal square root of layer normalization (RSQRT).

``DecomposeLayerNorm`` turns ``layer_norm`` into means, elementwise arithmetic and ``rsqrt``;
the others convert in their own families, ``rsqrt`` here. TFLite int8 RSQRT is a table
lookup with its own output parameters (annotated ``"unary"``).

# aten::rsqrt(Tensor self) -> Tensor
"""

from __future__ import annotations

from torch.fx import Node

from ..context import OP, Context
from ..ops_aliases import aten, at
from ..registry import operator
from ._checks import static_shapes


@operator(aten.rsqrt.default, aten=(at.rsqrt, at.rsqrt_), annotate="unary",
          checks=(static_shapes,))
def convert_rsqrt(ctx: Context, node: Node) -> None:
    x = ctx.value(node.args[0])
    out = ctx.output_value(node, perm=x.perm)
    ctx.op(OP.RSQRT, [ctx.tensor(x)], [out.tensor])
