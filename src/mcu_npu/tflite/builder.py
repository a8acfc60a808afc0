"""A small TFLite model builder on the ``schema_py_generated`` object API.

It only stores what converters hand it: tensors, constant buffers (deduplicated), operator
codes (deduplicated) and operators, then serializes one subgraph. Layout and quantization
decisions live in the converter context, not here.
"""

from __future__ import annotations

import hashlib

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

TFLITE_TYPES = {
    np.dtype(np.float32): schema.TensorType.FLOAT32,
    np.dtype(np.int8): schema.TensorType.INT8,
    np.dtype(np.uint8): schema.TensorType.UINT8,
    np.dtype(np.int16): schema.TensorType.INT16,
    np.dtype(np.int32): schema.TensorType.INT32,
    np.dtype(np.int64): schema.TensorType.INT64,
    np.dtype(np.bool_): schema.TensorType.BOOL,
}
NUMPY_TYPES = {v: k for k, v in TFLITE_TYPES.items()}
BUILTIN_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def options_type(options) -> int:
    """The ``BuiltinOptions`` union tag of an options object (``Conv2DOptionsT`` -> 1)."""
    if options is None:
        return schema.BuiltinOptions.NONE
    return getattr(schema.BuiltinOptions, type(options).__name__[:-1])


def operator_code(code: int, custom: str = "") -> schema.OperatorCodeT:
    """The operator-code table entry of builtin ``code`` (or of custom op ``custom``)."""
    oc = schema.OperatorCodeT()
    oc.builtinCode = code
    oc.deprecatedBuiltinCode = min(code, schema.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES)
    oc.version = 1
    if custom:
        oc.customCode = custom
    return oc


def serialize(model: schema.ModelT, size_hint: int = 1024) -> bytes:
    """A TFLite flatbuffer of ``model``."""
    fb = flatbuffers.Builder(size_hint)
    fb.Finish(model.Pack(fb), file_identifier=b"TFL3")
    return bytes(fb.Output())


class ModelBuilder:
    """Accumulates one TFLite subgraph and serializes it with ``finish()``."""

    def __init__(self, description: str = "mcu-npu"):
        self.model = schema.ModelT()
        self.model.version = 3
        self.model.description = description
        self.model.buffers = [schema.BufferT()]  # buffer 0: the empty sentinel
        self.model.operatorCodes = []
        self.graph = schema.SubGraphT()
        self.graph.tensors, self.graph.operators = [], []
        self.graph.inputs, self.graph.outputs = [], []
        self._opcodes: dict[tuple, int] = {}
        self.origin = ""  # name of the graph node being converted, recorded per operator
        self.op_origins: list[str] = []
        self._buffers: dict[bytes, int] = {}

    # tensors -----------------------------------------------------------------------------
    def add_tensor(
        self,
        name: str,
        shape,
        dtype,
        *,
        scale=None,
        zero_point=None,
        axis: int = 0,
        data: np.ndarray | None = None,
    ) -> int:
        """Add a tensor (a constant when ``data`` is given); returns its index."""
        t = schema.TensorT()
        t.name = name
        t.shape = [int(d) for d in shape]
        t.type = TFLITE_TYPES[np.dtype(dtype)]
        t.buffer = 0 if data is None else self._buffer(np.asarray(data, dtype=dtype))
        if scale is not None:
            q = schema.QuantizationParametersT()
            q.scale = [float(s) for s in np.atleast_1d(scale)]
            q.zeroPoint = [int(z) for z in np.atleast_1d(zero_point)]
            q.quantizedDimension = int(axis)
            t.quantization = q
        self.graph.tensors.append(t)
        return len(self.graph.tensors) - 1

    def tensor(self, index: int) -> schema.TensorT:
        return self.graph.tensors[index]

    def _buffer(self, data: np.ndarray) -> int:
        raw = np.ascontiguousarray(data).tobytes()
        key = hashlib.sha1(raw).digest() + str(data.dtype).encode()
        if key not in self._buffers:
            buf = schema.BufferT()
            buf.data = np.frombuffer(raw, dtype=np.uint8).copy() if raw else None
            self.model.buffers.append(buf)
            self._buffers[key] = len(self.model.buffers) - 1
        return self._buffers[key]

    # operators ---------------------------------------------------------------------------
    def add_operator(self, opcode: int, inputs, outputs, options=None, *, custom: str = "") -> int:
        op = schema.OperatorT()
        op.opcodeIndex = self._opcode(opcode, custom)
        op.inputs = [int(i) for i in inputs]
        op.outputs = [int(o) for o in outputs]
        op.builtinOptionsType = options_type(options)
        op.builtinOptions = options
        self.graph.operators.append(op)
        self.op_origins.append(self.origin)
        return len(self.graph.operators) - 1

    def _opcode(self, code: int, custom: str) -> int:
        key = (code, custom)
        if key not in self._opcodes:
            self.model.operatorCodes.append(operator_code(code, custom))
            self._opcodes[key] = len(self.model.operatorCodes) - 1
        return self._opcodes[key]

    # graph -------------------------------------------------------------------------------
    def set_io(self, inputs, outputs) -> None:
        self.graph.inputs = [int(i) for i in inputs]
        self.graph.outputs = [int(o) for o in outputs]

    def finish(self) -> bytes:
        self.model.subgraphs = [self.graph]
        return serialize(self.model)
