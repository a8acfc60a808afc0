"""The NPU operators of a partition as ExecuTorch's debugging tools name them: one per
operator of the partition's TFLite graph (the graph the NPU compiler compiled and the host
emulator runs).

The backend's ``preprocess`` and the host runtime both read them from the same graph bytes, so
the identifiers the debug-handle map is keyed by (``#<index>:<OPERATOR>``) are the ones the
host run's ETDump events carry. The ``#`` and ``:`` delimit the index, so no identifier is a
substring of another (ExecuTorch's Inspector also matches identifiers by substring).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ai_edge_litert import schema_py_generated as schema

_BUILTIN_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items()
                  if not k.startswith("_")}
_ITEM_SIZE = {schema.TensorType.INT8: 1, schema.TensorType.UINT8: 1,
              schema.TensorType.BOOL: 1, schema.TensorType.INT16: 2,
              schema.TensorType.FLOAT16: 2, schema.TensorType.INT32: 4,
              schema.TensorType.FLOAT32: 4, schema.TensorType.INT64: 8}


@dataclass(frozen=True)
class NpuOp:
    """One operator of a partition graph: its identifier, the names of its output tensors
    (the Edge nodes they were converted from carry the same names), its multiply-accumulates
    and the bytes it reads and writes."""

    index: int
    name: str
    outputs: tuple[str, ...]
    macs: int
    nbytes: int

    @property
    def identifier(self) -> str:
        return identifier(self.index, self.name)


def computes_edge_value(op: NpuOp) -> bool:
    """Whether the operator's output is an Edge node's value: the converter names such a
    tensor after the node, and the tensors it adds (padding, layout changes) with a ``/``."""
    return bool(op.outputs) and "/" not in op.outputs[0]


def identifier(index: int, name: str) -> str:
    """The delegate debug identifier of TFLite operator ``index`` (``name``: its opcode)."""
    return f"#{index}:{name}"


def npu_ops(tflite: bytes) -> list[NpuOp]:
    """The operators of the TFLite graph ``tflite``, in execution order. Read through the
    flatbuffer's accessors (no object-API copy of the weights), and kept for the last few
    graphs by their bytes: a partition's preprocess asks three times for the same graph."""
    return list(_npu_ops(bytes(tflite)))


@functools.lru_cache(maxsize=4)
def _npu_ops(tflite: bytes) -> tuple[NpuOp, ...]:
    model = schema.Model.GetRootAs(tflite, 0)
    graph = model.Subgraphs(0)
    tensors: dict[int, tuple] = {}

    def tensor(i: int) -> tuple:
        """(name, shape, type) of tensor ``i``, as the object API gives them."""
        if i not in tensors:
            t = graph.Tensors(i)
            shape = [] if t.ShapeIsNone() else [int(d) for d in t.ShapeAsNumpy()]
            tensors[i] = (t.Name(), shape, t.Type())
        return tensors[i]

    ops = []
    for k in range(graph.OperatorsLength()):
        op = graph.Operators(k)
        code = model.OperatorCodes(op.OpcodeIndex())
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        custom = code.CustomCode()
        name = custom.decode() if custom else _BUILTIN_NAMES[builtin]
        ins = [tensor(int(i)) for i in _indices(op.InputsAsNumpy()) if i >= 0]
        outs = [tensor(int(i)) for i in _indices(op.OutputsAsNumpy())]
        ops.append(NpuOp(k, name, tuple(t[0].decode() for t in outs),
                         _macs(name, ins, outs), sum(map(_nbytes, ins + outs))))
    return tuple(ops)


def _indices(vector) -> list:
    """A flatbuffer int vector read as numpy (0 where the vector is absent) as a list."""
    return [] if isinstance(vector, int) else vector.tolist()


def _shape(t) -> list[int]:
    return t[1]


def _nbytes(t) -> int:
    return math.prod(_shape(t)) * _ITEM_SIZE.get(t[2], 1)


def _macs(name: str, ins, outs) -> int:
    """Multiply-accumulates of one operator (0 for operators without a weight tensor)."""
    if not outs or len(ins) < 2:
        return 0
    out, weights = math.prod(_shape(outs[0])), _shape(ins[1])
    if name == "CONV_2D" and len(weights) == 4:
        return out * math.prod(weights[1:])
    if name == "DEPTHWISE_CONV_2D" and len(weights) == 4:
        return out * weights[1] * weights[2]
    if name == "FULLY_CONNECTED" and len(weights) == 2:
        return out * weights[1]
    if name == "TRANSPOSE_CONV" and len(ins) > 2:
        w = _shape(ins[1])  # [out channels, kh, kw, in channels], per input element
        return math.prod(_shape(ins[2])) * w[0] * w[1] * w[2] if len(w) == 4 else 0
    if name == "BATCH_MATMUL":
        return out * _shape(ins[0])[-1]
    return 0
