"""RemoveOutputDequantize: a program output becomes the int8 tensor its dequantize read.

Before::

    y = executorch_call_delegate(npu, ...)[0]                        # i8[1, 10]
    out = dequantize_per_tensor(y, scale, zero_point, -128, 127, int8)   # or cortex_m's
    return (out,)

After::

    y = executorch_call_delegate(npu, ...)[0]
    return (y,)                                                      # i8[1, 10]

Every float user output must be made by a dequantize_per_tensor (portable or ``cortex_m``)
of an int8 tensor; the output then is that tensor (the graph signature follows), and the
dequantize is erased when nothing else reads it. A float output made by another op (a CPU
op that computes in float) raises ``UnsupportedModelError`` naming the output and the op.
Non-float outputs are left as they are (recorded without a scale). Everything is checked
before the graph changes. Runs on the final Edge program; records every user output in
``self.outputs``.
"""

from __future__ import annotations

import torch
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram
from torch.export.graph_signature import TensorArgument
from torch.fx import Node

from mcu_npu.errors import UnsupportedModelError
from mcu_npu.passes.edge._io import (DEQUANTIZE, IOQuantization, as_is, describe, dtype_name,
                                     is_float, op_key, qparams, set_outputs, user_outputs)


class RemoveOutputDequantize(ExportedProgramPassBase):
    """Return the integer tensor of every float user output instead of its dequantize."""

    def __init__(self, dtype: torch.dtype = torch.int8):
        self.dtype = dtype
        self.outputs: list[IOQuantization] = []

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        graph = exported_program.graph_module.graph
        output, values, specs, user = user_outputs(exported_program)
        records, rewrites = [], []
        for index, position in enumerate(user):
            node = values[position]
            if not isinstance(node, Node) or not is_float(node):
                records.append(as_is(index, f"output_{index}", node))
                continue
            scale, zero_point, quant_min, quant_max, dtype = self._check(f"output {index}", node)
            rewrites.append((position, node))
            records.append(IOQuantization(index, f"output_{index}",
                                          tuple(node.args[0].meta["val"].shape), dtype, scale,
                                          zero_point, quant_min, quant_max))
        self.outputs = [r for r in records if r is not None]
        if not rewrites:  # all checked first: an error leaves the graph as it was
            return ExportedProgramPassResult(exported_program, False)
        for position, node in rewrites:
            values[position] = node.args[0]
            specs[position].arg = TensorArgument(name=node.args[0].name)
        set_outputs(output, values)
        for node in dict.fromkeys(node for _, node in rewrites):
            if not node.users:
                graph.erase_node(node)
        exported_program.graph_module.recompile()
        return ExportedProgramPassResult(exported_program, True)

    def _check(self, label: str, node: Node) -> tuple:
        """The qparams of the dequantize making output ``node``."""
        want = dtype_name(self.dtype)
        if op_key(node) not in DEQUANTIZE:
            raise UnsupportedModelError(
                f"{label} cannot be {want}: {describe(node)} makes it in float on the CPU, not "
                f"by dequantizing int8 data; use io='float', or end the model with an op the "
                f"NPU or an int8 kernel runs")
        params = qparams(node)
        if params[4] != self.dtype:
            raise UnsupportedModelError(f"{label} cannot be {want}: it is dequantized from "
                                        f"{dtype_name(params[4])}; use io='float'")
        return params
