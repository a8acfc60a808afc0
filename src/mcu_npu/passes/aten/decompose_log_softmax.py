"""DecomposeLogSoftmax: ``log_softmax(x, dim)`` becomes ``log(softmax(x, dim))`` before
quantization.

Before::

    y = log_softmax(x, dim)        # a classifier's or a CTC head's log-probabilities

After::

    y = log(softmax(x, dim))

No NPU compiler takes TFLite's LOG_SOFTMAX (Vela leaves it to the CPU), while SOFTMAX and
LOG run on every NPU. The softmax is quantized at its fixed 1/256 step, so probabilities
below 1/512 read as zero and their log as the output's lowest value; the quantized
reference rounds there too. Exact in float while no probability underflows.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, replace_nodes
from ...graph.schema import bind

aten = torch.ops.aten
_LOG_SOFTMAX = (aten.log_softmax.int, aten._log_softmax.default)


def _plain_log_softmax(node: Node) -> bool:
    """A float32 log_softmax with no dtype change."""
    if node.op != "call_function" or node.target not in _LOG_SOFTMAX:
        return False
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype != torch.float32:
        return False
    extra = node.args[2] if len(node.args) > 2 else node.kwargs.get("dtype")
    return extra in (None, False, torch.float32)


def _log_of_softmax(graph_module: GraphModule, node: Node) -> Node:
    emit = Emitter(graph_module.graph, node)
    dim = bind(node).dim
    return emit(aten.log.default, emit(aten.softmax.int, node.args[0], dim))


class DecomposeLogSoftmax(PassBase):
    """Rewrite every ``log_softmax`` into ``log(softmax(x))``."""

    def call(self, graph_module: GraphModule) -> PassResult:
        return PassResult(graph_module,
                          replace_nodes(graph_module, _plain_log_softmax, _log_of_softmax))
