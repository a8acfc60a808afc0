"""Tensor creation: ``full`` (zeros / ones, e.g. a recurrent layer's initial state) folds into a
constant; its quantize node then yields an int8 constant.

# aten::full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, ...) -> Tensor
"""

from __future__ import annotations

import numpy as np
from torch.fx import Node

from .. import layout
from ..args import bind
from ..context import Context, Value
from ..ops_aliases import aten
from ..registry import operator


@operator(aten.full.default)
def convert_full(ctx: Context, node: Node) -> None:
    a = bind(node)
    data = np.full([int(d) for d in a.size], float(a.fill_value), dtype=np.float32)
    ctx.define(node, Value(data.shape, data.dtype, None, layout.identity(data.ndim), data=data))
