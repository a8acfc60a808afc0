"""Conversion state shared by the operator converters.

A ``Value`` is what a graph node becomes in TFLite: a tensor (or a constant not yet
materialized) plus its layout ``perm`` and quantization. Quantize / dequantize pairs inside a
partition disappear: a dequantize node simply maps to the int8 value it reads.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np
import torch
from ai_edge_litert import schema_py_generated as schema
from torch.export import ExportedProgram
from torch.fx import Node

from ..errors import ConversionError
from . import layout
from .args import shape_of
from .builder import ModelBuilder
from .ops_aliases import DEQUANTIZE, DEQUANTIZE_PER_CHANNEL, QUANTIZE

OP = schema.BuiltinOperator


@dataclass(frozen=True)
class QParams:
    """Affine quantization: ``real = scale * (q - zero_point)``, per tensor or along ``axis``."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    qmin: int = -128
    qmax: int = 127
    axis: int = 0
    dtype: np.dtype = np.dtype(np.int8)

    @property
    def per_channel(self) -> bool:
        return len(self.scale) > 1

    def quantize(self, x: np.ndarray) -> np.ndarray:
        s = np.asarray(self.scale, dtype=np.float64)
        z = np.asarray(self.zero_point, dtype=np.int64)
        if self.per_channel:
            shape = [1] * x.ndim
            shape[self.axis] = -1
            s, z = s.reshape(shape), z.reshape(shape)
        q = np.round(np.asarray(x, dtype=np.float64) / s) + z
        return np.clip(q, self.qmin, self.qmax).astype(self.dtype)

    def same_as(self, other: "QParams | None") -> bool:
        return other is not None and np.allclose(self.scale, other.scale, rtol=1e-6) and \
            self.zero_point == other.zero_point and self.dtype == other.dtype


@dataclass(eq=False)
class Value:
    """A converted node: ``tensor`` holds ``torch_value.permute(perm)``; constants keep ``data``."""

    shape: tuple[int, ...]
    dtype: np.dtype
    q: QParams | None
    perm: tuple[int, ...]
    tensor: int | None = None
    data: np.ndarray | None = None  # constant contents in PyTorch layout
    _layouts: dict = field(default_factory=dict)
    view: tuple | None = None
    """``(base, offsets)`` for a slice not emitted yet: the window of the activation ``base``
    starting at ``offsets`` (per PyTorch axis), laid out like ``base``. Slices of it read
    ``base`` directly; anything else gets it materialized by ``Context.tensor``."""

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def rank(self) -> int:
        return len(self.shape)


def window(base: Value, offsets, shape, tflite_shape) -> tuple[list[int], list[int]]:
    """STRIDED_SLICE begin / end (TFLite axes) of the window ``shape`` of ``base`` at
    ``offsets`` (PyTorch axes)."""
    begin, stop = [0] * base.rank, list(tflite_shape)
    for d in range(base.rank):
        axis = base.perm.index(d)
        begin[axis], stop[axis] = offsets[d], offsets[d] + shape[d]
    return begin, stop


def _is(node, targets) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


class Context:
    """Everything a converter needs: the program, the builder, values and helper emitters."""

    def __init__(self, program: ExportedProgram, builder: ModelBuilder, target=None):
        self.program = program
        self.builder = builder
        self.target = target
        self.values: dict[Node, Value] = {}
        self._int32: dict[tuple, int] = {}
        sig = program.graph_signature
        self._const_names = {
            **sig.inputs_to_parameters,
            **sig.inputs_to_buffers,
            **sig.inputs_to_lifted_tensor_constants,
        }

    # constants ---------------------------------------------------------------------------
    def is_constant(self, node) -> bool:
        return isinstance(node, Node) and node.op == "placeholder" and node.name in self._const_names

    def constant(self, node: Node) -> torch.Tensor:
        name = self._const_names[node.name]
        if name in self.program.state_dict:
            return self.program.state_dict[name]
        return self.program.constants[name]

    def qparams(self, qdq: Node) -> QParams:
        """Quantization parameters of a quantize / dequantize node."""
        args = list(qdq.args)
        if _is(qdq, DEQUANTIZE_PER_CHANNEL):
            scale = self._tensor_arg(args[1]).reshape(-1)
            zp = self._tensor_arg(args[2]).reshape(-1)
            qmin, qmax, dtype, axis = args[4], args[5], args[6], args[3]
        else:
            scale = [float(self._scalar_arg(args[1]))]
            zp = [int(self._scalar_arg(args[2]))]
            qmin, qmax, dtype, axis = args[3], args[4], args[5], 0
        return QParams(
            scale=tuple(float(s) for s in scale),
            zero_point=tuple(int(z) for z in zp),
            qmin=int(qmin),
            qmax=int(qmax),
            axis=int(axis),
            dtype=np.dtype(torch.empty(0, dtype=dtype).numpy().dtype),
        )

    def _tensor_arg(self, arg) -> np.ndarray:
        if isinstance(arg, Node):
            return self.constant(arg).detach().numpy()
        return np.asarray(arg)

    def _scalar_arg(self, arg):
        return self._tensor_arg(arg).item() if isinstance(arg, Node) else arg

    # values ------------------------------------------------------------------------------
    def value(self, arg) -> Value:
        """The converted value an argument refers to (seen through dequantize nodes)."""
        if arg in self.values:
            return self.values[arg]
        if _is(arg, DEQUANTIZE + DEQUANTIZE_PER_CHANNEL):
            src = arg.args[0]
            if self.is_constant(src):
                data = self.constant(src).detach().numpy()
                q = self.qparams(arg)
                return self._remember(arg, Value(data.shape, q.dtype, q, layout.identity(data.ndim),
                                                 data=data))
            return self._remember(arg, self.value(src))
        if self.is_constant(arg):
            data = self.constant(arg).detach().numpy()
            return self._remember(arg, Value(data.shape, data.dtype, None,
                                             layout.identity(data.ndim), data=data))
        raise ConversionError(f"node {arg} feeds the partition but was not converted")

    def _remember(self, node: Node, value: Value) -> Value:
        self.values[node] = value
        return value

    def define(self, node: Node, value: Value) -> Value:
        """Bind ``node`` (and the quantize nodes reading it with the same parameters)."""
        self.values[node] = value
        for user in node.users:
            if _is(user, QUANTIZE) and value.q is not None and self.qparams(user).same_as(value.q):
                self.values[user] = value
        return value

    def output_q(self, node: Node) -> QParams:
        """The quantization of ``node``'s output, read from the quantize nodes that consume it."""
        qs = [self.qparams(u) for u in node.users if _is(u, QUANTIZE)]
        if not qs or len(qs) != len(node.users):
            raise ConversionError(f"{node.name}: output is not quantized")
        return qs[0]

    def new_value(self, name: str, shape, q: QParams | None, perm=None, dtype=None) -> Value:
        """A fresh activation tensor for an op output, laid out as ``perm``."""
        shape = tuple(int(d) for d in shape)
        perm = tuple(perm) if perm is not None else layout.identity(len(shape))
        dtype = np.dtype(dtype) if dtype is not None else (q.dtype if q else np.dtype(np.float32))
        idx = self.builder.add_tensor(
            name, layout.permute_shape(shape, perm), dtype,
            scale=None if q is None else q.scale, zero_point=None if q is None else q.zero_point,
        )
        v = Value(shape, dtype, q, perm, tensor=idx)
        v._layouts[perm] = idx
        return v

    def output_value(self, node: Node, shape=None, perm=None, q: QParams | None = None) -> Value:
        """Create and bind the output value of ``node`` (quantized as its consumers say)."""
        shape = shape_of(node) if shape is None else shape
        return self.define(node, self.new_value(node.name, shape, q or self.output_q(node), perm))

    # layout ------------------------------------------------------------------------------
    def tensor(self, value: Value, perm=None) -> int:
        """Index of a TFLite tensor holding ``value`` laid out as ``perm`` (default: its own)."""
        if value.view is not None and value.tensor is None:
            self._materialize(value)
        perm = value.perm if perm is None else tuple(perm)
        if perm in value._layouts:
            return value._layouts[perm]
        if value.is_const:
            idx = self._const_tensor(value, perm)
        else:
            src = self.tensor(value)
            shape = layout.permute_shape(value.shape, perm)
            idx = self.builder.add_tensor(
                f"{self.builder.tensor(src).name}/{''.join(map(str, perm))}", shape, value.dtype,
                scale=None if value.q is None else value.q.scale,
                zero_point=None if value.q is None else value.q.zero_point,
            )
            if layout.same_memory_order(value.shape, value.perm, perm):
                self.reshape_op(src, idx, shape)
            else:
                self._transpose(src, idx, layout.permute_shape(value.shape, value.perm),
                                layout.relative(value.perm, perm), value)
        value._layouts[perm] = idx
        return idx

    def _transpose(self, src: int, dst: int, src_shape, perm, value: Value) -> None:
        """TRANSPOSE ``src`` by ``perm`` into ``dst``; on NPUs whose compiler schedules it
        faster (``transpose_as_block_swap``), a permutation that swaps two blocks of axes
        (NCHW -> NHWC is (N, C, HW) -> (N, HW, C)) becomes a 3-D transpose between reshapes."""
        swap = self.target is not None and self.target.npu.transpose_as_block_swap
        blocks = layout.block_swap(src_shape, perm) if swap else None
        if blocks is None:
            self.op(OP.TRANSPOSE, [src, self.int32(perm)], [dst], schema.TransposeOptionsT())
            return
        q = dict(scale=None if value.q is None else value.q.scale,
                 zero_point=None if value.q is None else value.q.zero_point)
        name = self.builder.tensor(src).name
        a = self.builder.add_tensor(f"{name}/blocks", blocks, value.dtype, **q)
        b = self.builder.add_tensor(f"{name}/swapped", (blocks[0], blocks[2], blocks[1]),
                                    value.dtype, **q)
        self.reshape_op(src, a, blocks)
        self.op(OP.TRANSPOSE, [a, self.int32((0, 2, 1))], [b], schema.TransposeOptionsT())
        self.reshape_op(b, dst, layout.permute_shape(src_shape, perm))

    def _materialize(self, value: Value) -> None:
        """Emit the STRIDED_SLICE a lazy slice stands for."""
        base, offsets = value.view
        src = self.tensor(base)
        begin, stop = window(base, offsets, value.shape, self.builder.tensor(src).shape)
        idx = self.builder.add_tensor(
            f"{self.builder.tensor(src).name}/window", layout.permute_shape(value.shape, value.perm),
            value.dtype, scale=None if value.q is None else value.q.scale,
            zero_point=None if value.q is None else value.q.zero_point)
        self.op(OP.STRIDED_SLICE, [src, self.int32(begin), self.int32(stop),
                                   self.int32([1] * value.rank)], [idx],
                schema.StridedSliceOptionsT())
        value.tensor = idx
        value._layouts[value.perm] = idx

    def _const_tensor(self, value: Value, perm) -> int:
        data = np.transpose(value.data, perm) if value.rank else value.data
        q = value.q
        axis = perm.index(q.axis) if q is not None and q.per_channel else 0
        return self.builder.add_tensor(
            f"const{len(self.builder.graph.tensors)}", data.shape, data.dtype,
            scale=None if q is None else q.scale, zero_point=None if q is None else q.zero_point,
            axis=axis, data=data,
        )

    # emitters ----------------------------------------------------------------------------
    def op(self, code: int, inputs, outputs, options=None) -> int:
        return self.builder.add_operator(code, inputs, outputs, options)

    def int32(self, values) -> int:
        """An int32 constant (shapes, slice bounds); equal ones are one shared tensor."""
        data = np.asarray(values, dtype=np.int32)
        key = (data.shape, data.tobytes())
        if key not in self._int32:
            self._int32[key] = self.builder.add_tensor(
                f"i32_{len(self.builder.graph.tensors)}", data.shape, np.int32, data=data)
        return self._int32[key]

    def reshape_op(self, src: int, dst: int, shape) -> None:
        opts = schema.ReshapeOptionsT()
        opts.newShape = [int(d) for d in shape]
        self.op(OP.RESHAPE, [src, self.int32(list(shape))], [dst], opts)

    def const_value(self, data: np.ndarray, q: QParams | None) -> Value:
        """A constant operand: float data is quantized with ``q`` when given."""
        data = np.asarray(data)
        if q is not None and data.dtype.kind == "f":
            data = q.quantize(data)
        return Value(data.shape, data.dtype, q, layout.identity(data.ndim), data=data)

    def getitem_users(self, node: Node) -> dict[int, Node]:
        return {u.args[1]: u for u in node.users if u.target is operator.getitem}
