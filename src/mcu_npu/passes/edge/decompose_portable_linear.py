"""DecomposePortableLinear: a linear layer left to the portable kernels becomes the ops they
have.

Before::

    y = linear(x, W, b)                     # x: [..., K], W: [N, K]

After::

    Wt = permute_copy(W, [1, 0])
    y = view_copy(addmm(b, view_copy(x, [-1, K]), Wt), [..., N])   # mm without a bias

ExecuTorch's portable kernels have no ``aten::linear.out``; ``to_edge`` keeps ``linear``
whole for the NPU and the Cortex-M lowering, which take it. One they did not take (every CPU
op after the Cortex-M lowering failed, or a target without Cortex-M kernels) would leave a
program the firmware cannot run. ``addmm``, ``mm``, ``permute_copy`` and ``view_copy`` are
portable kernels; a 2-D input needs no ``view_copy``. Runs on the Edge program after the
Cortex-M lowering, where a remaining ``linear`` is a float one.
"""

from __future__ import annotations

import math

import torch
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram
from torch.fx import Node

from ...upstream.private import exir_ops
from mcu_npu.graph.schema import bind

aten = exir_ops.edge.aten
LINEAR = aten.linear.default


class DecomposePortableLinear(ExportedProgramPassBase):
    """Replace every Edge ``linear`` by ``permute_copy`` and ``addmm`` (or ``mm``)."""

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        graph = exported_program.graph_module.graph
        found = [n for n in graph.nodes if n.op == "call_function" and n.target == LINEAR]
        for node in found:
            a = bind(node)
            x, weight, bias = a.input, a.weight, a.bias
            shape = list(node.meta["val"].shape)
            k = weight.meta["val"].shape[-1]

            def emit(op, *args):
                made = graph.call_function(op, args)
                made.meta = {**node.meta,
                             "val": op(*(a.meta["val"] if isinstance(a, Node) else a
                                         for a in args))}
                return made

            with graph.inserting_before(node):
                flat = x if x.meta["val"].dim() == 2 else \
                    emit(aten.view_copy.default, x, [math.prod(shape[:-1]), k])
                transposed = emit(aten.permute_copy.default, weight, [1, 0])
                y = emit(aten.addmm.default, bias, flat, transposed) if bias is not None \
                    else emit(aten.mm.default, flat, transposed)
                if len(shape) != 2:
                    y = emit(aten.view_copy.default, y, shape)
            node.replace_all_uses_with(y)
            graph.erase_node(node)
        if found:
            exported_program.graph_module.recompile()
        return ExportedProgramPassResult(exported_program, bool(found))
