"""RemoveInputQuantize: a program input becomes the int8 tensor its quantize made.

Before::

    x: f32[1, 1, 8, 8] = placeholder
    q = quantize_per_tensor(x, scale, zero_point, -128, 127, int8)   # or cortex_m's
    ... = executorch_call_delegate(npu, q)

After::

    x: i8[1, 1, 8, 8] = placeholder                                  # same shape, int8
    ... = executorch_call_delegate(npu, x)

Every float user input must be read by quantize_per_tensor ops only (the portable
``quantized_decomposed`` one, or the ``cortex_m`` one the Cortex-M lowering swaps in), all
with the same scale, zero point and range; they are removed and their readers read the
input. An input some op reads in float (a CPU op that runs on float data) cannot become int8
and raises ``UnsupportedModelError`` naming the input and that op. Non-float and unused
inputs are left as they are (recorded without a scale). Everything is checked before the
graph changes, so an error leaves it as it was. The pass runs on the final Edge program
(after delegation and the Cortex-M lowering) and records every user input in ``self.inputs``.
"""

from __future__ import annotations

import torch
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram

from mcu_npu.errors import UnsupportedModelError
from mcu_npu.passes.edge._io import (QUANTIZE, IOQuantization, as_is, describe, dtype_name,
                                     is_float, op_key, qparams)


class RemoveInputQuantize(ExportedProgramPassBase):
    """Drop the quantize of every float user input; the input takes its integer type."""

    def __init__(self, dtype: torch.dtype = torch.int8, indices=None):
        self.dtype = dtype
        self.indices = None if indices is None else frozenset(indices)
        """The user inputs to make integer (None: all); the others are recorded as they are."""
        self.inputs: list[IOQuantization] = []

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        graph = exported_program.graph_module.graph
        placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
        records, rewrites = [], []
        for index, name in enumerate(exported_program.graph_signature.user_inputs):
            node = placeholders.get(name)
            if node is None or not is_float(node) or not node.users or \
                    (self.indices is not None and index not in self.indices):
                records.append(as_is(index, str(node.target if node else name), node))
                continue
            params = self._check(f"input {index} ({node.target})", node)
            rewrites.append((node, list(node.users)))
            records.append(IOQuantization(index, str(node.target), tuple(node.meta["val"].shape),
                                          params[4], *params[:4]))
        for node, quantizes in rewrites:  # all checked first: an error leaves the graph as it was
            node.meta["val"] = quantizes[0].meta["val"]
            node.meta.pop("tensor_meta", None)  # float metadata; "val" is what passes read
            for q in quantizes:
                q.replace_all_uses_with(node)
                graph.erase_node(q)
        self.inputs = [r for r in records if r is not None]
        if rewrites:
            exported_program.graph_module.recompile()
        return ExportedProgramPassResult(exported_program, bool(rewrites))

    def _check(self, label: str, node) -> tuple:
        """The one set of qparams every reader of input ``node`` quantizes it with."""
        want = dtype_name(self.dtype)
        floats = [u for u in node.users if op_key(u) not in QUANTIZE]
        if floats:
            raise UnsupportedModelError(
                f"{label} cannot be {want}: {describe(floats[0])} reads it as float on the CPU "
                f"before any quantization; use io='float', or start the model with an op the "
                f"NPU or an int8 kernel runs")
        params = sorted({qparams(q) for q in node.users}, key=str)
        if len(params) > 1:
            listed = ", ".join(f"scale {p[0]:.6g} zero point {p[1]}" for p in params)
            raise UnsupportedModelError(
                f"{label} cannot be {want}: its readers quantize it with {len(params)} "
                f"different parameters ({listed}); use io='float'")
        if params[0][4] != self.dtype:
            raise UnsupportedModelError(f"{label} cannot be {want}: it is quantized to "
                                        f"{dtype_name(params[0][4])}; use io='float'")
        return params[0]
