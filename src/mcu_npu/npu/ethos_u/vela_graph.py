"""TFLite rewrites that let Vela schedule a partition with fewer copies.

Vela writes a tensor straight into the buffer of the CONCATENATION that reads it only when
the concatenation is the tensor's single reader; any other reader (or a graph output) turns
that input into a MemoryCopy, about 4 cycles per byte on an Ethos-U55. An unrolled recurrent
layer gathers its per-step outputs this way, and each step's output also feeds the next
step. ``own_concat_inputs`` gives each such input a producer of its own, ``MAXIMUM(x, x)``:
it is exact (same bytes, same quantization), the cheapest elementwise op Vela has (about
half a cycle per element), and Vela writes it into the concatenation in place.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from ai_edge_litert import schema_py_generated as schema

from ...device.tflite_model import TFLiteModel
from ...tflite.builder import operator_code, serialize
from ...tflite.describe import load_model

OP = schema.BuiltinOperator


def own_concat_inputs(model: TFLiteModel) -> TFLiteModel:
    """``model`` with a ``MAXIMUM(x, x)`` copy for every concatenation input ``x`` that is
    produced by an operator and read elsewhere too; ``model`` itself when there is none, or
    when the flatbuffer does not parse (Vela then says so in its own words)."""
    try:
        if not _shared_concat_inputs(model.buffer):
            return model
        tfl = load_model(model.buffer)
        graph = tfl.subgraphs[0]
    except Exception:  # flatbuffers raises assorted types on bad bytes
        return model
    codes = [c.builtinCode for c in tfl.operatorCodes]
    produced = {t for op in graph.operators for t in op.outputs}
    readers = Counter(t for op in graph.operators for t in op.inputs if t >= 0)
    readers.update(graph.outputs)
    copies = {id(op): [k for k, t in enumerate(op.inputs) if t in produced and readers[t] > 1]
              for op in graph.operators if codes[op.opcodeIndex] == OP.CONCATENATION}
    if not any(copies.values()):
        return model
    maximum = _opcode(tfl, OP.MAXIMUM)
    origins = model.op_origins or ("",) * len(graph.operators)
    operators, new_origins = [], []
    for op, origin in zip(graph.operators, origins):
        if copies.get(id(op)):
            op.inputs = [int(t) for t in op.inputs]  # the object API reads a read-only array
            for k in copies[id(op)]:
                copy = _tensor_like(graph, op.inputs[k])
                operators.append(_operator(maximum, [op.inputs[k]] * 2, [copy]))
                new_origins.append(origin)
                op.inputs[k] = copy
        operators.append(op)
        new_origins.append(origin)
    graph.operators = operators
    return dataclasses.replace(model, buffer=serialize(tfl, len(model.buffer) + 1024),
                               op_origins=tuple(new_origins) if model.op_origins else ())


def _shared_concat_inputs(buffer: bytes) -> bool:
    """Whether some concatenation input is produced by an operator and read elsewhere too,
    read through the flatbuffer's accessors: most graphs have none, and unpacking a graph's
    objects (its weights among them) costs more than the rest of the check."""
    model = schema.Model.GetRootAs(buffer, 0)
    graph = model.Subgraphs(0)
    ops = [graph.Operators(k) for k in range(graph.OperatorsLength())]
    inputs = [_ints(op.InputsAsNumpy()) for op in ops]
    produced = {t for op in ops for t in _ints(op.OutputsAsNumpy())}
    readers = Counter(t for ins in inputs for t in ins if t >= 0)
    readers.update(_ints(graph.OutputsAsNumpy()))
    concat = [model.OperatorCodes(op.OpcodeIndex()).BuiltinCode() == OP.CONCATENATION
              for op in ops]
    return any(t in produced and readers[t] > 1
               for ins, is_concat in zip(inputs, concat) if is_concat for t in ins)


def _ints(vector) -> list[int]:
    """A flatbuffer int vector read as numpy (0 where the vector is absent) as a list."""
    return [] if isinstance(vector, int) else vector.tolist()


def _opcode(tfl: schema.ModelT, code: int) -> int:
    for i, c in enumerate(tfl.operatorCodes):
        if c.builtinCode == code and not c.customCode:
            return i
    tfl.operatorCodes.append(operator_code(code))
    return len(tfl.operatorCodes) - 1


def _tensor_like(graph: schema.SubGraphT, index: int) -> int:
    source = graph.tensors[index]
    t = schema.TensorT()
    t.name = (source.name or b"") + b"_for_concat"
    t.shape, t.type, t.buffer = list(source.shape), source.type, 0
    t.quantization = source.quantization
    graph.tensors.append(t)
    return len(graph.tensors) - 1


def _operator(opcode: int, inputs, outputs) -> schema.OperatorT:
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = opcode, list(inputs), list(outputs)
    op.builtinOptionsType = schema.BuiltinOptions.MaximumMinimumOptions
    op.builtinOptions = schema.MaximumMinimumOptionsT()
    return op
