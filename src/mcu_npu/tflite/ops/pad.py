"""constant_pad_nd: PAD (zero value) or PADV2 (any value), pads mapped through the layout.

# aten::constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from ..args import bind
from ..context import OP, Context
from ..ops_aliases import aten, at
from ..registry import operator
from ._checks import static_shapes


def non_negative_pads(node: Node, target=None) -> bool:
    """padding amounts must not be negative (cropping is not supported)"""
    return all(p >= 0 for p in bind(node).pad)


@operator(aten.constant_pad_nd.default, aten=(at.pad, at.constant_pad_nd), annotate="shared",
          checks=(static_shapes, non_negative_pads), int16=True)
def convert_pad(ctx: Context, node: Node) -> None:
    a = bind(node)
    x = ctx.value(a.self)
    out = ctx.output_value(node, perm=x.perm)
    pads = [[0, 0] for _ in range(x.rank)]
    for i in range(len(a.pad) // 2):  # torch lists (before, after) from the last axis back
        pads[x.rank - 1 - i] = [a.pad[2 * i], a.pad[2 * i + 1]]
    tpads = ctx.int32([pads[d] for d in x.perm])
    inputs = [ctx.tensor(x), tpads]
    if float(a.value) != 0.0:
        inputs.append(ctx.tensor(ctx.const_value(np.array(float(a.value), np.float32), out.q)))
        ctx.op(OP.PADV2, inputs, [out.tensor], schema.PadV2OptionsT())
    else:
        ctx.op(OP.PAD, inputs, [out.tensor], schema.PadOptionsT())
