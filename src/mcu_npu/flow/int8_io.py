"""Int8 I/O: the program's integer inputs and outputs. With ``io="int8"`` the quantize
reading each program input and the dequantize making each output are removed from the
lowered program, so the program takes and returns the int8 tensors the NPU (or the Cortex-M
kernels) consume and produce. Inputs declared as the sensor gives them (``io_spec``) are
integer too: an int8 one loses its quantize here (pinned to one step per value, ``q = x``),
a uint8 / int16 one became a placeholder of its type before partitioning
(``passes.edge.TakeIntegerInput``, run by ``take_integer_inputs``). ``outputs="int8"`` keeps
the int8 outputs. The report records every parameter (``device.program_io`` converts with
them on the host)."""

from __future__ import annotations

import torch

from ..errors import ConfigError, stage
from ..io_spec import ProgramIO
from ..passes.edge.order import INT8_IO, INTEGER_INPUTS
from ..passes.edge.take_integer_input import INPUT_QPARAMS


def int8_io(edge, io) -> tuple:
    """The stage: ``quantize_io`` when ``io`` (a ``ProgramIO``, or the ``io`` mode name)
    asks for integer inputs or outputs, else ``edge`` as it is and no I/O parameters."""
    program_io = io if isinstance(io, ProgramIO) else ProgramIO((), io, io)
    if not program_io.changes_program:
        return edge, {}
    return quantize_io(edge, program_io)


def quantize_io(edge, program_io: ProgramIO = ProgramIO((), "int8", "int8")) -> tuple:
    """(``edge`` with integer program inputs and outputs, their quantization as the report's
    ``io``): the quantize reading each such input and the dequantize making each output are
    removed from the lowered program in place (``passes.edge.order.INT8_IO``)."""
    program = _one_method(edge)
    count = len(program.graph_signature.user_inputs)
    removed = [i for i in range(count) if _int8_input(program_io, i)]
    remove_quantize, remove_dequantize = INT8_IO.passes
    inputs, outputs = remove_quantize(indices=removed), remove_dequantize()
    with stage("making the program's inputs and outputs int8",
               "compile with io='float', or report it"):
        inputs(program)
        if program_io.outputs == "int8":
            outputs(program)
    records = [r.as_dict() for r in inputs.inputs]
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    for r, i in zip(records, range(count)):
        spec = program_io.spec(i)
        if spec is None or not spec.is_raw:
            continue
        r["declared"] = spec.as_dict()
        node = placeholders.get(program.graph_signature.user_inputs[i])
        taken = node.meta.get(INPUT_QPARAMS) if node is not None else None
        if taken is not None:  # uint8 / int16: how TakeIntegerInput reads the data
            r.update(zip(("scale", "zero_point", "quant_min", "quant_max"), taken[:4]))
            r["scale"], r["dtype"] = float(r["scale"]), spec.dtype
    mode = "int8" if program_io.mode == "int8" else "declared"
    return edge, {"mode": mode, "inputs": records,
                  "outputs": [r.as_dict() for r in outputs.outputs]}


def take_integer_inputs(edge, program_io: ProgramIO):
    """Before partitioning: the uint8 / int16 declared inputs made placeholders of their type
    (``passes.edge.order.INTEGER_INPUTS``); ``edge`` changed in place and returned."""
    dtypes = {i: getattr(torch, s.dtype) for i, s in enumerate(program_io.inputs)
              if s is not None and s.dtype in ("uint8", "int16")}
    if dtypes:
        (take,) = INTEGER_INPUTS.passes
        with stage("making the declared inputs take the sensor's data",
                   "declare the input 'float', or report it"):
            take(dtypes)(_one_method(edge))
    return edge


def _int8_input(program_io: ProgramIO, index: int) -> bool:
    spec = program_io.spec(index)
    if spec is not None and spec.is_raw:
        return spec.dtype == "int8"
    return program_io.mode == "int8"


def _one_method(edge):
    if len(edge.methods) != 1:
        raise ConfigError(f"integer program I/O takes a program with one method, this one "
                          f"has {len(edge.methods)}")
    return edge.exported_program(next(iter(edge.methods)))
