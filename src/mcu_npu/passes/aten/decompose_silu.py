"""DecomposeSiLU: ``silu(x)`` becomes ``mul(x, sigmoid(x))`` before quantization.

Before::

    y = silu(x)

After::

    y = mul(x, sigmoid(x))

Every target runs SiLU as a sigmoid (LOGISTIC on the NPU, the sigmoid table on the
Cortex-M) whose int8 output, at the fixed 1/256 step, feeds a multiply. Quantized as one
op, the reference would skip that rounding of the gate; a network of many SiLUs then drifts
from what the device computes by more than the numerics contract allows. Split, the
reference quantizes the gate where the device does. The rewrite is exact in float.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, replace_nodes

aten = torch.ops.aten


def _silu(node: Node) -> bool:
    return node.op == "call_function" and node.target == aten.silu.default


def _gate(graph_module: GraphModule, node: Node) -> Node:
    emit = Emitter(graph_module.graph, node)
    return emit(aten.mul.Tensor, node.args[0], emit(aten.sigmoid.default, node.args[0]))


class DecomposeSiLU(PassBase):
    """Rewrite every ``silu`` into ``mul(x, sigmoid(x))``."""

    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module, replace_nodes(graph_module, _silu, _gate))
