"""Int8 I/O: with ``io="int8"`` the quantize reading each program input and the dequantize
making each output are removed from the lowered program, so the program takes and returns
the int8 tensors the NPU (or the Cortex-M kernels) consume and produce; the report records
their parameters (``device.program_io`` converts with them on the host)."""

from __future__ import annotations

from ..errors import ConfigError, stage
from ..passes.edge import RemoveInputQuantize, RemoveOutputDequantize


def int8_io(edge, io: str) -> tuple:
    """The stage: ``quantize_io`` when ``io`` is "int8", else ``edge`` as it is and no I/O
    parameters."""
    if io != "int8":
        return edge, {}
    return quantize_io(edge)


def quantize_io(edge) -> tuple:
    """(``edge`` with int8 program inputs and outputs, their quantization as the report's
    ``io``): the quantize reading each input and the dequantize making each output are
    removed from the lowered program in place (``passes.edge``)."""
    if len(edge.methods) != 1:
        raise ConfigError(f"io='int8' takes a program with one method, this one has "
                          f"{len(edge.methods)}")
    program = edge.exported_program(next(iter(edge.methods)))
    inputs, outputs = RemoveInputQuantize(), RemoveOutputDequantize()
    with stage("making the program's inputs and outputs int8",
               "compile with io='float', or report it"):
        inputs(program)
        outputs(program)
    return edge, {"mode": "int8", "inputs": [r.as_dict() for r in inputs.inputs],
                  "outputs": [r.as_dict() for r in outputs.outputs]}
