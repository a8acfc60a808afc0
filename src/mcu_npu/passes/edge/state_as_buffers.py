"""StateAsBuffers: each lifted state input and output pair becomes a mutable buffer again.

``passes.aten.LiftState`` made each buffer a model updates in place an input (read) and an
output (written) of the graph, placed after the model's own. On the lowered program this
pass gives the pair back to ExecuTorch as a mutable buffer: the input becomes a buffer
placeholder whose initial value is stored in the program (``et_init_buffer``), the output
its ``BUFFER_MUTATION``. ExecuTorch plans the buffer's memory, keeps it between ``execute``
calls and writes the new value back with one ``copy_`` at the end of the call.

Where the state is quantized with one encoding for the read and the write (the state's
quantize and the new value's dequantize share scale, zero point and int8 range), both are
dropped: the buffer is int8, the NPU (or the Cortex-M kernels) read and write it as it is,
and a value round the loop is never requantized. Otherwise the buffer stays float and is
quantized where it is read, as any float input.

Before::

    x: f32 = placeholder; state_h: f32 = placeholder
    q = quantize_per_tensor(state_h, s, z, -128, 127, int8)
    y, h = executorch_call_delegate(npu, x', q)
    return (dequantize(y, ...), dequantize_per_tensor(h, s, z, -128, 127, int8))

After::

    state_h: i8 = placeholder                # buffer "h", initial value stored
    x: f32 = placeholder
    y, h = executorch_call_delegate(npu, x', state_h)
    return (h, dequantize(y, ...))           # h: BUFFER_MUTATION of "h"
"""

from __future__ import annotations

from dataclasses import replace

import torch
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram
from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec,
                                          OutputKind, OutputSpec, TensorArgument)
from torch.fx import Node

from mcu_npu.upstream.private import set_graph_signature
from mcu_npu.passes.edge._io import (DEQUANTIZE, QUANTIZE, op_key, qparams, set_outputs,
                                     user_outputs)
from mcu_npu.program_state import ProgramState


class StateAsBuffers(ExportedProgramPassBase):
    """Make the last ``len(state.tensors)`` user inputs and outputs the state's buffers;
    ``self.state`` records each buffer's type and encoding."""

    def __init__(self, state: ProgramState):
        self.state = state

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        if not self.state:
            return ExportedProgramPassResult(exported_program, False)
        ep = exported_program
        graph = ep.graph_module.graph
        signature = ep.graph_signature
        count = len(self.state.tensors)
        in_specs = list(signature.input_specs)
        output, values, out_specs, user_out = user_outputs(ep)
        user_in = [i for i, s in enumerate(in_specs) if s.kind == InputKind.USER_INPUT]
        if len(user_in) < count or len(user_out) < count:
            raise ValueError(f"the program has {len(user_in)} inputs and {len(user_out)} "
                             f"outputs, fewer than its {count} state tensors")
        placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
        first_user = placeholders[in_specs[user_in[0]].arg.name]
        buffers_in, buffers_out = [], []
        for k, tensor in enumerate(self.state.tensors):
            in_pos, out_pos = user_in[-count + k], user_out[-count + k]
            node = placeholders[in_specs[in_pos].arg.name]
            value = values[out_pos]
            encoding = _shared_int8(node, value)
            if encoding is not None:
                for quantize in list(node.users):
                    quantize.replace_all_uses_with(node)
                    graph.erase_node(quantize)
                node.meta["val"] = value.args[0].meta["val"]
                values[out_pos] = value = value.args[0]
                scale, zero_point = encoding
                tensor = replace(tensor, scale=scale, zero_point=zero_point, dtype="int8")
                self.state = self.state.with_tensor(k, scale=scale, zero_point=zero_point,
                                                    dtype="int8")
            node.meta.pop("tensor_meta", None)
            node.meta["et_init_buffer"] = True
            name = tensor.name
            ep.state_dict[name] = tensor.encoded_initial()
            if node is not first_user:  # buffers come before the user inputs
                first_user.prepend(node)
            buffers_in.append(InputSpec(InputKind.BUFFER, TensorArgument(node.name), name,
                                        persistent=True))
            buffers_out.append((out_pos, OutputSpec(OutputKind.BUFFER_MUTATION,
                                                    TensorArgument(value.name), name)))
        for node in list(graph.nodes):  # dequantizes of the state no longer read
            if op_key(node) in DEQUANTIZE and not node.users:
                graph.erase_node(node)
        lifted = set(user_in[-count:])
        kept_in = [s for i, s in enumerate(in_specs) if i not in lifted]
        first = next(i for i, s in enumerate(kept_in) if s.kind == InputKind.USER_INPUT) \
            if any(s.kind == InputKind.USER_INPUT for s in kept_in) else len(kept_in)
        new_in = kept_in[:first] + buffers_in + kept_in[first:]
        moved = {pos for pos, _ in buffers_out}
        new_out = [spec for _, spec in buffers_out] + \
            [s for i, s in enumerate(out_specs) if i not in moved]
        new_values = [values[pos] for pos, _ in buffers_out] + \
            [v for i, v in enumerate(values) if i not in moved]
        set_outputs(output, new_values)
        set_graph_signature(ep, ExportGraphSignature(new_in, new_out))
        graph.lint()
        ep.graph_module.recompile()
        return ExportedProgramPassResult(ep, True)


def _shared_int8(node: Node, value) -> tuple[float, int] | None:
    """(scale, zero point) where state input ``node`` is read only by int8 quantizes and
    output ``value`` is an int8 dequantize, all of one encoding; else None."""
    if not isinstance(value, Node) or op_key(value) not in DEQUANTIZE or not node.users:
        return None
    if any(op_key(user) not in QUANTIZE for user in node.users):
        return None
    params = {qparams(user) for user in node.users} | {qparams(value)}
    if len(params) != 1:
        return None
    scale, zero_point, quant_min, quant_max, dtype = params.pop()
    if dtype != torch.int8 or (quant_min, quant_max) != (-128, 127):
        return None
    return scale, zero_point
