"""DecomposeOnCpu: activations kept whole for the NPU are decomposed where they run on the CPU.

Before (a node the plan leaves to the CPU)::

    y = hardswish(x)        # silu, hardsigmoid, prelu alike

After::

    y = mul(x, mul(hardtanh(add(x, 3), 0, 6), 1/6))
    # silu(x)       = mul(x, sigmoid(x))
    # hardsigmoid(x) = mul(hardtanh(add(x, 3), 0, 6), 1/6)
    # prelu(x, w)   = add(relu(x), mul(sub(x, relu(x)), w seen on the channel axis))

The NPU converters take these ops whole (one TFLite op each), so ``to_edge`` keeps them
whole everywhere. On the CPU that is wrong: ExecuTorch's portable kernels have no
``silu``, ``hardswish``, ``hardsigmoid`` or ``prelu`` (and no out variant at all for
``prelu``), and the Cortex-M lowering takes them only inside its own patterns. Decomposed,
each part gets its own Cortex-M rule (sigmoid table, add, clamp, mul) or a portable kernel.
The rewrite is exact in float. The new nodes keep the replaced node's id and placement stamp
(``node.meta["custom"]``), so the plan and the report see one op.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, finish

aten = torch.ops.aten


class _Emit(Emitter):
    """An emitter that also copies the replaced node's ``custom`` meta (id, stamps)."""

    def __call__(self, op, *args) -> Node:
        node = super().__call__(op, *args)
        if "custom" in self.source.meta:
            node.meta["custom"] = dict(self.source.meta["custom"])
        return node


def _hardsigmoid(emit: _Emit, x: Node) -> Node:
    return emit(aten.mul.Tensor, emit(aten.hardtanh.default, emit(aten.add.Tensor, x, 3.0),
                                      0.0, 6.0), 1.0 / 6.0)


def _prelu(emit: _Emit, x: Node, w: Node) -> Node:
    rank = x.meta["val"].dim()
    if rank > 2 and w.meta["val"].numel() > 1:  # per channel: the weight on axis 1
        w = emit(aten.view.default, w, [w.meta["val"].numel()] + [1] * (rank - 2))
    pos = emit(aten.relu.default, x)
    return emit(aten.add.Tensor, pos, emit(aten.mul.Tensor, emit(aten.sub.Tensor, x, pos), w))


REWRITES = {
    aten.silu.default: lambda emit, n: emit(aten.mul.Tensor, n.args[0],
                                            emit(aten.sigmoid.default, n.args[0])),
    aten.hardsigmoid.default: lambda emit, n: _hardsigmoid(emit, n.args[0]),
    aten.hardswish.default: lambda emit, n: emit(aten.mul.Tensor, n.args[0],
                                                 _hardsigmoid(emit, n.args[0])),
    aten.prelu.default: lambda emit, n: _prelu(emit, n.args[0], n.args[1]),
}
"""Op -> its decomposition, emitted before the node it replaces."""


def decompose_on_cpu(graph_module: GraphModule, nodes: Iterable[Node]) -> bool:
    """Replace each of ``nodes`` that has a rewrite in ``REWRITES``; True if any was."""
    found = [n for n in nodes if n.op == "call_function" and n.target in REWRITES
             and isinstance(n.meta.get("val"), torch.Tensor)]
    for node in found:
        out = REWRITES[node.target](_Emit(graph_module.graph, node), node)
        node.replace_all_uses_with(out)
        graph_module.graph.erase_node(node)
    if found:
        finish(graph_module)
    return bool(found)


class DecomposeOnCpu(PassBase):
    """``decompose_on_cpu`` for the nodes ``keep_whole`` rejects (default: every node)."""

    def __init__(self, keep_whole=lambda node: False):
        super().__init__()
        self.keep_whole = keep_whole

    def call(self, graph_module: GraphModule) -> PassResult:
        nodes = [n for n in graph_module.graph.nodes if not self.keep_whole(n)]
        return PassResult(graph_module, decompose_on_cpu(graph_module, nodes))
