"""The NPU operators of a partition as ExecuTorch's debugging tools name them: one per
operator of the partition's TFLite graph (the graph the NPU compiler compiled and the host
emulator runs).

The backend's ``preprocess`` and the host runtime both read them from the same graph bytes, so
the identifiers the debug-handle map is keyed by (``#<index>:<OPERATOR>``) are the ones the
host run's ETDump events carry. The ``#`` and ``:`` delimit the index, so no identifier is a
substring of another (ExecuTorch's Inspector also matches identifiers by substring).
"""

from __future__ import annotations

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
    """The operators of the TFLite graph ``tflite``, in execution order."""
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(bytes(tflite), 0))
    graph = model.subgraphs[0]
    ops = []
    for k, op in enumerate(graph.operators):
        code = model.operatorCodes[op.opcodeIndex]
        builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
        name = code.customCode.decode() if code.customCode else _BUILTIN_NAMES[builtin]
        ins = [graph.tensors[i] for i in op.inputs if i >= 0]
        outs = [graph.tensors[i] for i in op.outputs]
        ops.append(NpuOp(k, name, tuple(t.name.decode() for t in outs),
                         _macs(name, ins, outs), sum(map(_nbytes, ins + outs))))
    return ops


def _shape(t) -> list[int]:
    return [int(d) for d in t.shape] if t.shape is not None else []


def _nbytes(t) -> int:
    return math.prod(_shape(t)) * _ITEM_SIZE.get(t.type, 1)


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
