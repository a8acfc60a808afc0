"""Softmax: TFLite SOFTMAX over the innermost axis, or on an NPU whose compiler makes SOFTMAX a
long program (``NpuSpec.table_softmax``) a short chain of tables.

Vela builds an int8 SOFTMAX from TFLite's fixed-point algorithm: 15 operations on the U85 and
28 on the U55, about 3.5 KB of command stream and tables for a 12-class classifier on the
U85-256 (5,712 bytes of Vela output against 2,512 for the chain, Vela 5.2). The chain::

    m = REDUCE_MAX(x)            exact: the input's quantization
    d = SUB(x, m)                exact: the input's step, zero point 127 (d spans [-255 step, 0])
    e = EXP(d)                   a table; [0, 1] at step 1/255, 1 exact for the largest
    s = FULLY_CONNECTED(e, 1s)   the sum over the classes, [0, C] at step C/255
    r = RSQRT(s); r2 = MUL(r, r) a table and a square: 1/s, [0, 1] at step 1/255
    y = MUL(e, r2)               at the softmax's fixed 1/256 step

Every op is one whose int8 arithmetic LiteRT's reference kernels and Vela share (the sum is a
fully connected layer of ones, not SUM: LiteRT's reference int8 SUM wraps around). The price
is precision: the sum and ``1/s`` are int8, so an output is off by up to about C/2 output
steps where TFLite's SOFTMAX is within one (12 classes: a mean of about 1 step per row, up
to 6). The order of the outputs is kept (``y`` is ``e`` times one factor per row), so a
classifier's decision is the same. So the chain is only offered for a model's final softmax
over at most ``MAX_TABLE_CLASSES`` classes (a classifier's probabilities), and taken where
``flow.softmax_form`` measures the whole model within the numerics contract of TFLite's
SOFTMAX (it marks the node ``TABLES``); a softmax feeding more layers (an attention, a
detector's distribution over bins) stays TFLite's SOFTMAX.
"""

from __future__ import annotations

import math

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from ..context import OP, Context, QParams
from ..ops_aliases import aten, at
from ..registry import operator
from ._checks import static_shapes

MAX_TABLE_CLASSES = 64
"""Most classes the chain of tables takes: its error grows with the class count (about C/2
output steps at worst)."""


def softmax_on_last_memory_axis(node: Node, target=None) -> bool:
    """softmax must have a static dim"""
    return isinstance(node.args[1], int)


def neutron_softmax_limits(node: Node, target=None) -> bool:
    """softmax on Neutron: at most 2040 channels, 4096 rows and 524288 elements"""
    lim = target.npu.limits if target is not None else None
    if lim is None:
        return True
    shape = tuple(node.args[0].meta["val"].shape)
    channels = shape[node.args[1] % len(shape)]
    rows = math.prod(shape) // channels
    return channels <= lim.max_softmax_channels and rows <= lim.max_softmax_rows and \
        channels * rows <= lim.max_softmax_elements


TABLES = "mcu_npu_softmax_tables"
"""Meta key of an Edge graph's softmax node that runs as the chain of tables: set by
``flow.softmax_form`` where the whole model's accuracy allows it."""


def _as_tables(ctx: Context, node: Node, classes: int, q: QParams) -> bool:
    """Whether this softmax runs as the chain of tables (see the module's docstring)."""
    npu = ctx.target.npu if ctx.target is not None else None
    return bool(npu is not None and npu.table_softmax and node.meta.get(TABLES)
                and q.dtype == np.int8 and 2 <= classes <= MAX_TABLE_CLASSES)


def simulate_tables(xq: np.ndarray, scale: float) -> np.ndarray:
    """The chain's output (real values) for int8 inputs ``xq`` of step ``scale``, classes on
    the last axis, rounding in float64 where each op of the chain rounds: what
    ``flow.softmax_form`` weighs against TFLite's SOFTMAX."""
    classes = xq.shape[-1]
    d = (xq - xq.max(-1, keepdims=True)).astype(np.float64) * scale
    e = np.clip(np.round(np.exp(d) * 255.0), 0, 255) / 255.0
    s = np.clip(np.round(e.sum(-1, keepdims=True) * 255.0 / classes), 0, 255) * classes / 255.0
    r = np.clip(np.round(255.0 / np.sqrt(np.maximum(s, 1e-9))), 0, 255) / 255.0
    r2 = np.clip(np.round(r * r * 255.0), 0, 255) / 255.0
    return np.clip(np.round(e * r2 * 256.0), 0, 255) / 256.0


def _tables(ctx: Context, node: Node, src: int, x_q: QParams, out) -> None:
    """Emit the chain of tables from ``src`` (classes innermost) into ``out``."""
    shape = list(ctx.builder.tensor(src).shape)
    classes, row = shape[-1], shape[:-1] + [1]
    lo, hi = x_q.qmin, x_q.qmax

    def tensor(suffix: str, tshape, scale: float, zero_point: int) -> int:
        return ctx.builder.add_tensor(f"{node.name}/{suffix}", tshape, np.int8, scale=scale,
                                      zero_point=zero_point)

    def unit(suffix: str, tshape) -> int:  # [0, 1] at step 1/255
        return tensor(suffix, tshape, 1.0 / 255.0, lo)

    reducer = schema.ReducerOptionsT()
    reducer.keepDims = True
    top = tensor("max", row, x_q.scale[0], x_q.zero_point[0])
    ctx.op(OP.REDUCE_MAX, [src, ctx.int32([len(shape) - 1])], [top], reducer)
    d = tensor("shifted", shape, x_q.scale[0], hi)
    ctx.op(OP.SUB, [src, top], [d], schema.SubOptionsT())
    e = unit("exp", shape)
    ctx.op(OP.EXP, [d], [e], schema.ExpOptionsT())
    flat = [math.prod(shape[:-1]), classes]
    e_rows = ctx.builder.add_tensor(f"{node.name}/exp_rows", flat, np.int8,
                                    scale=1.0 / 255.0, zero_point=lo)
    ctx.reshape_op(e, e_rows, flat)
    ones = ctx.builder.add_tensor(f"{node.name}/ones", [1, classes], np.int8, scale=1.0,
                                  zero_point=0, data=np.ones((1, classes), np.int8))
    total = tensor("sum", [flat[0], 1], classes / 255.0, lo)
    ctx.op(OP.FULLY_CONNECTED, [e_rows, ones, -1], [total], schema.FullyConnectedOptionsT())
    root = unit("rsqrt", [flat[0], 1])
    ctx.op(OP.RSQRT, [total], [root])
    inverse = unit("inverse", [flat[0], 1])
    ctx.op(OP.MUL, [root, root], [inverse], schema.MulOptionsT())
    inverse_row = unit("inverse_row", row)
    ctx.reshape_op(inverse, inverse_row, row)
    ctx.op(OP.MUL, [e, inverse_row], [out.tensor], schema.MulOptionsT())


@operator(aten._softmax.default, aten=(at.softmax, at._softmax), annotate="softmax",
          checks=(static_shapes, softmax_on_last_memory_axis, neutron_softmax_limits),
          int16=True)
def convert_softmax(ctx: Context, node: Node) -> None:
    """TFLite SOFTMAX works on the innermost axis: lay the tensor out with ``dim`` last.
    int16 (input zero point 0, output 1/32768): LiteRT's kernel takes exp and 1 / (1 + x)
    from interpolated tables, within a step on 10 classes, up to 15 steps on 64."""
    x = ctx.value(node.args[0])
    dim = node.args[1] % x.rank
    perm = tuple(d for d in x.perm if d != dim) + (dim,)
    out = ctx.output_value(node, perm=perm)
    src = ctx.tensor(x, perm)
    if _as_tables(ctx, node, x.shape[dim], x.q):
        _tables(ctx, node, src, x.q, out)
        return
    opts = schema.SoftmaxOptionsT()
    opts.beta = 1.0
    ctx.op(OP.SOFTMAX, [src], [out.tensor], opts)
