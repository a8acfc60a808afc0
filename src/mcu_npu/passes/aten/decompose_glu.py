"""DecomposeGLU: ``glu(x, dim)`` becomes ``a * sigmoid(b)`` over the two halves of ``x``
before quantization.

Before::

    y = glu(x, 1)                  # x: (N, 2C, T), the gate of a gated temporal convolution

After::

    y = mul(slice(x, 1, 0, C), sigmoid(slice(x, 1, C, 2C)))

Core-ATen decomposition would split the GLU only after quantization, leaving its slices,
sigmoid and multiply unquantized on the CPU. Split first, the sigmoid is quantized at its
fixed 1/256 step where the device rounds it, as ``DecomposeSiLU`` does, and every NPU runs
the three ops. Exact in float.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, replace_nodes
from ...graph.schema import bind

aten = torch.ops.aten


def _glu(node: Node) -> bool:
    if node.op != "call_function" or node.target != aten.glu.default:
        return False
    val = node.args[0].meta.get("val") if isinstance(node.args[0], Node) else None
    return val is not None and all(isinstance(d, int) for d in val.shape)


def _gate(graph_module: GraphModule, node: Node) -> Node:
    emit = Emitter(graph_module.graph, node)
    x = node.args[0]
    shape = x.meta["val"].shape
    dim = bind(node).dim % len(shape)
    half = shape[dim] // 2
    a = emit(aten.slice.Tensor, x, dim, 0, half, 1)
    b = emit(aten.slice.Tensor, x, dim, half, 2 * half, 1)
    return emit(aten.mul.Tensor, a, emit(aten.sigmoid.default, b))


class DecomposeGLU(PassBase):
    """Rewrite every ``glu`` into a multiply by the sigmoid of its second half."""

    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module, replace_nodes(graph_module, _glu, _gate))
