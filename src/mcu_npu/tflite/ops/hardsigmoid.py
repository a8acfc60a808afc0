"""hardsigmoid(x) = relu6(x + 3) / 6, which TFLite has no builtin for (it has HARD_SWISH only).

# aten::hardsigmoid(Tensor self) -> Tensor
Two integer ops reproduce the quantized reference exactly (up to the kernels' fixed-point
rounding): ADD(x, 3) with a fused RELU6 into a tensor whose scale is 6 times the output's and
whose zero point is the output's, so its integers already are round(relu6(x + 3) / 6 / scale)
+ zero point, clamped where the reference's output is; then MUL by an exact 1/6 onto the
output scale, a rescale by exactly 1 of those integers. Both ops run on Vela and Neutron;
with int16 activations the constants are int16 too (TFLite's 16x8 ADD / MUL), on Vela.
"""

from __future__ import annotations

from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from ..context import OP, Context
from ..ops_aliases import aten, at
from ..registry import operator
from ._checks import max_rank, static_shapes
from .activations import ACT
from .elementwise import _expand_rank, exact_scalar


@operator(aten.hardsigmoid.default, aten=(at.hardsigmoid,), annotate="unary",
          checks=(static_shapes, max_rank(6)),
          preserve=(at.hardsigmoid.default,), int16=True)
def convert_hardsigmoid(ctx: Context, node: Node) -> None:
    x = ctx.value(node.args[0])
    out = ctx.output_value(node, perm=x.perm)
    q = out.q
    shape = ctx.builder.tensor(out.tensor).shape
    sum6 = ctx.builder.add_tensor(f"{node.name}/relu6_x_plus_3", shape, q.dtype,
                                  scale=tuple(6.0 * s for s in q.scale), zero_point=q.zero_point)
    three = ctx.tensor(_expand_rank(ctx, exact_scalar(3.0, q.dtype), x.rank), x.perm)
    add = schema.AddOptionsT()
    add.fusedActivationFunction = ACT.RELU6
    add.potScaleInt16 = False  # int16: TFLite's general rescaling
    ctx.op(OP.ADD, [ctx.tensor(x), three], [sum6], add)
    sixth = ctx.tensor(_expand_rank(ctx, exact_scalar(1.0 / 6.0, q.dtype), x.rank), x.perm)
    ctx.op(OP.MUL, [sum6, sixth], [out.tensor], schema.MulOptionsT())
