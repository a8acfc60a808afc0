"""log: TFLite LOG, a table lookup in int8 that the reference kernels, Vela (U55, U85) and
Neutron run. ``log_softmax`` reaches it as ``log(softmax(x))`` (``DecomposeLogSoftmax``).

# aten::log(Tensor self) -> Tensor
"""

from __future__ import annotations

from torch.fx import Node

from ..context import OP, Context
from ..ops_aliases import aten, at
from ..registry import operator
from ._checks import static_shapes


@operator(aten.log.default, aten=(at.log, at.log_), annotate="unary", checks=(static_shapes,))
def convert_log(ctx: Context, node: Node) -> None:
    """The table holds the log of each input value, rounded into the output's parameters;
    an input of zero gives the output's lowest value, as the reference's -inf clamps."""
    x = ctx.value(node.args[0])
    out = ctx.output_value(node, perm=x.perm)
    ctx.op(OP.LOG, [ctx.tensor(x)], [out.tensor])
