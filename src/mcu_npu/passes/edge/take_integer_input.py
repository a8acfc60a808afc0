"""TakeIntegerInput: a program input declared uint8 (camera pixels) or int16 (a front-end's
features) becomes a placeholder of that type whose conversion to the NPU's int8 is the first
op of its partition.

Before (a uint8 input's quantization pinned to the pixel range, scale 1 and zero point -128,
by ``quantization.pinned_inputs``)::

    x: f32[1, 32, 32, 3] = placeholder                       # pixel values 0.0 .. 255.0
    q = quantize_per_tensor(x, 1.0, -128, -128, 127, int8)   # q = pixel - 128

After::

    x: u8[1, 32, 32, 3] = placeholder                        # the pixels as they are
    d = dequantize_per_tensor(x, 1.0, 0, 0, 255, uint8)      # d = pixel
    q = quantize_per_tensor(d, 1.0, -128, -128, 127, int8)

The pair ``d``, ``q`` is a requantize that the NPU partition reading ``q`` takes in: its
TFLite graph gets a uint8 (int16) input and a QUANTIZE to int8 (for pixels ``q = u - 128``,
exact), which Vela runs on the NPU. The device runtimes copy 1- and 2-byte integer tensors
byte for byte (``device.delegate_io``), so the data reach the NPU as the sensor wrote them.
Runs on the Edge program before partitioning. An input read by anything but quantizes with
one set of parameters raises ``UnsupportedModelError`` naming the input; nothing changes
before every input is checked.
"""

from __future__ import annotations

import torch
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram

from ...upstream.private import exir_ops
from mcu_npu.errors import UnsupportedModelError
from mcu_npu.passes.edge._io import QUANTIZE, describe, dtype_name, op_key, qparams


INPUT_QPARAMS = "mcu_npu_input_qparams"
"""The placeholder's meta key holding (scale, zero point, min, max, dtype) of its data."""


def input_qparams(quantize: tuple, dtype: torch.dtype) -> tuple:
    """How the ``dtype`` data read: uint8 as the int8 quantize reads it with the zero point
    128 higher (``q = u - 128``, a pure shift: exact), int16 as its numbers (scale 1, the
    quantize a real requantize)."""
    info = torch.iinfo(dtype)
    scale, zero_point, qmin, qmax, qdtype = quantize
    if dtype == torch.uint8 and qdtype == torch.int8 and (qmin, qmax) == (-128, 127):
        return (scale, zero_point + 128, info.min, info.max, dtype)
    return (1.0, 0, info.min, info.max, dtype)


class TakeIntegerInput(ExportedProgramPassBase):
    """Make user input ``i`` a ``dtypes[i]`` placeholder read through a requantize."""

    def __init__(self, dtypes: dict[int, torch.dtype]):
        self.dtypes = dict(dtypes)

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        graph = exported_program.graph_module.graph
        placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
        names = exported_program.graph_signature.user_inputs
        found = []
        for index, dtype in self.dtypes.items():
            node = placeholders[names[index]]
            wrong = [u for u in node.users if op_key(u) not in QUANTIZE]
            if wrong or not node.users or len({qparams(u) for u in node.users}) > 1:
                what = describe(wrong[0]) if wrong else "nothing" if not node.users else \
                    "quantizes with different parameters"
                raise UnsupportedModelError(
                    f"input {index} ({node.target}) cannot take {dtype_name(dtype)} data: "
                    f"{what} reads it, not one int8 quantize; declare it 'float', or start "
                    "the model with an op the NPU runs")
            found.append((node, dtype))
        dequantize = exir_ops.edge.quantized_decomposed.dequantize_per_tensor.default
        for node, dtype in found:
            val = node.meta["val"]
            params = input_qparams(qparams(next(iter(node.users))), dtype)
            with graph.inserting_after(node):
                d = graph.call_function(dequantize, (node, *params))
            node.meta[INPUT_QPARAMS] = params
            for q in list(node.users):
                if q is not d:
                    q.replace_input_with(node, d)
            d.meta["val"] = val
            node.meta["val"] = val.to(dtype)
            node.meta.pop("tensor_meta", None)
        if found:
            exported_program.graph_module.recompile()
        return ExportedProgramPassResult(exported_program, bool(found))
