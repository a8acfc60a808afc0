"""The LiteRT interpreter as the host stand-in for an NPU: TFLite's reference int8 kernels
define the numerics device kernels follow, so they (not XNNPACK) run the emulated graphs."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from ..device.tflite_model import TFLiteModel, input_array, output_array


def interpreter(buffer: bytes, *, keep_all_tensors: bool = False) -> Interpreter:
    """An interpreter with the reference kernels; ``keep_all_tensors`` keeps every
    intermediate tensor readable after ``invoke`` (LiteRT otherwise reuses their memory)."""
    interp = Interpreter(
        model_content=bytes(buffer),
        experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
        num_threads=1,
        experimental_preserve_all_tensors=keep_all_tensors,
    )
    interp.allocate_tensors()
    return interp


class TensorValue(NamedTuple):
    """A TFLite tensor after a run: its data in the TFLite layout and its quantization
    (``scale`` None for an unquantized tensor)."""

    data: np.ndarray
    scale: float | None
    zero_point: int


def op_outputs(buffer: bytes, interp: Interpreter) -> dict[str, TensorValue]:
    """Every operator output of the graph in ``buffer`` by tensor name, read from ``interp``
    after ``invoke`` (made with ``keep_all_tensors=True``)."""
    graph = schema.Model.GetRootAs(bytes(buffer), 0).Subgraphs(0)
    ops = [graph.Operators(k) for k in range(graph.OperatorsLength())]
    wanted = {int(op.Outputs(j)) for op in ops for j in range(op.OutputsLength())}
    values = {}
    for detail in interp.get_tensor_details():
        if detail["index"] not in wanted:
            continue
        q = detail["quantization_parameters"]
        scales, zeros = q["scales"], q["zero_points"]
        scale = float(scales[0]) if len(scales) == 1 else None
        zero = int(zeros[0]) if len(zeros) == 1 else 0
        values[detail["name"]] = TensorValue(np.array(interp.get_tensor(detail["index"])),
                                             scale, zero)
    return values


def run_model(model: TFLiteModel, inputs, interp: Interpreter | None = None) -> list[np.ndarray]:
    """Run a converted partition on PyTorch-layout inputs; outputs come back in PyTorch layout."""
    interp = interp or interpreter(model.buffer)
    for spec, x in zip(model.inputs, inputs):
        interp.set_tensor(spec.index, input_array(spec, x))
    interp.invoke()
    return [output_array(spec, interp.get_tensor(spec.index)) for spec in model.outputs]
