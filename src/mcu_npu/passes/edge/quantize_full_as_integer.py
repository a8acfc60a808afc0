"""QuantizeFullAsInteger: a quantized ``full`` is made in its integer type.

Before::

    c0 = full([1, 1, 24], 0.0)                                   # a zero initial state
    q = quantize_per_tensor(c0, scale, -128, -128, 127, int8)
    ... = dequantize_per_tensor(q, scale, -128, -128, 127, int8)

After::

    q = full([1, 1, 24], -128, dtype=int8)                       # the quantized value
    ... = dequantize_per_tensor(q, scale, -128, -128, 127, int8)

ExecuTorch's Cortex-M lowering drops a quantize whose input is computed from no tensor (it
treats it as a constant's, folded elsewhere) and leaves the float ``full`` feeding an int8
dequantize, a program the kernels refuse (an LSTM's zero cell state, a GRU's zero state in
a bidirectional layer). Made in int8, the value is the one the quantize gives (computed by
``quantize_per_tensor`` itself), so the program computes what the quantized reference does.
A ``full_like`` (made from a tensor's shape alone) is such a ``full`` too.
Runs on the Edge program before that lowering.
"""

from __future__ import annotations

import torch
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram

from ...upstream.private import exir_ops


FULL = exir_ops.edge.aten.full.default
FULL_LIKE = exir_ops.edge.aten.full_like.default
QUANTIZE = exir_ops.edge.quantized_decomposed.quantize_per_tensor.default


class QuantizeFullAsInteger(ExportedProgramPassBase):
    """Replace every per-tensor quantize of a float ``full`` (or ``full_like``) by an integer
    ``full``."""

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        graph = exported_program.graph_module.graph
        modified = False
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target != QUANTIZE:
                continue
            source = node.args[0]
            if not (isinstance(source, torch.fx.Node) and source.target in (FULL, FULL_LIKE)
                    and source.kwargs.get("dtype") in (None, torch.float32)):
                continue
            size, value = source.args[:2]
            if source.target == FULL_LIKE:  # the shape of its argument, not its values
                size = source.meta["val"].shape
            scale, zero_point, qmin, qmax, dtype = node.args[1:6]
            quantized = torch.ops.quantized_decomposed.quantize_per_tensor(
                torch.tensor([float(value)]), scale, zero_point, qmin, qmax, dtype)
            with graph.inserting_before(node):
                made = graph.call_function(FULL, (list(size), int(quantized[0])),
                                           {"dtype": dtype})
            made.meta = dict(node.meta)
            node.replace_all_uses_with(made)
            graph.erase_node(node)
            if not source.users:
                graph.erase_node(source)
            modified = True
        if modified:
            exported_program.graph_module.recompile()
        return ExportedProgramPassResult(exported_program, modified)
