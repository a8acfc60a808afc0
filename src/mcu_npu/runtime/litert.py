"""The LiteRT interpreter as the host stand-in for an NPU: TFLite's reference int8 kernels
define the numerics device kernels follow, so they (not XNNPACK) run the emulated graphs."""

from __future__ import annotations

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from ..tflite_model import TFLiteModel, input_array, output_array


def interpreter(buffer: bytes) -> Interpreter:
    interp = Interpreter(
        model_content=bytes(buffer),
        experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
        num_threads=1,
    )
    interp.allocate_tensors()
    return interp


def run_model(model: TFLiteModel, inputs, interp: Interpreter | None = None) -> list[np.ndarray]:
    """Run a converted partition on PyTorch-layout inputs; outputs come back in PyTorch layout."""
    interp = interp or interpreter(model.buffer)
    for spec, x in zip(model.inputs, inputs):
        interp.set_tensor(spec.index, input_array(spec, x))
    interp.invoke()
    return [output_array(spec, interp.get_tensor(spec.index)) for spec in model.outputs]
