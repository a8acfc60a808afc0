"""Edge partition -> TFLite int8 flatbuffer.

The walk is linear over the graph: quantize/dequantize nodes fold into tensor quantization,
every other node goes to the converter registered for its Edge op. Partition inputs and
outputs are int8 TFLite tensors; ``IOSpec`` says how each maps back to PyTorch (layout and,
for float boundaries, the quantization the caller applies).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx import Node

from ..device.delegate_io import choose_layout
from ..errors import ConversionError, InvalidProgramError, first_line
from ..device.tflite_model import IOSpec, TFLiteModel
from . import layout
from .args import shape_of
from .builder import ModelBuilder
from .context import OP, Context, Value, _is
from .ops_aliases import DEQUANTIZE, DEQUANTIZE_PER_CHANNEL, QUANTIZE, aten
from .registry import lookup

CHANNELS_LAST_OPS = {
    aten.convolution.default,
    aten.max_pool2d_with_indices.default,
    aten.max_pool2d.default,
    aten.avg_pool2d.default,
    aten._adaptive_avg_pool2d.default,
}


def convert(program: ExportedProgram, target=None) -> TFLiteModel:
    """Convert a quantized Edge program (or partition) to a TFLite int8 model."""
    builder = ModelBuilder()
    ctx = Context(program, builder, target)
    graph = program.graph_module.graph
    user_inputs = [
        spec.arg.name for spec in program.graph_signature.input_specs
        if spec.kind == InputKind.USER_INPUT
    ]
    inputs = [_convert_input(ctx, n) for n in graph.nodes
              if n.op == "placeholder" and n.name in user_inputs]

    for node in graph.nodes:
        if node.op != "call_function" or node in ctx.values:
            continue
        builder.origin = node.name
        if _is(node, DEQUANTIZE + DEQUANTIZE_PER_CHANNEL):
            continue
        with _converting(node.name):
            _convert_node(ctx, node, target)

    (out_node,) = [n for n in graph.nodes if n.op == "output"]
    outputs = []
    for i, arg in enumerate(out_node.args[0]):
        builder.origin = arg.name if isinstance(arg, Node) else builder.origin
        with _converting(builder.origin):
            outputs.append(_convert_output(ctx, arg, i))
    builder.set_io([s.index for s in inputs], [s.index for s in outputs])
    return TFLiteModel(builder.finish(), tuple(inputs), tuple(outputs), tuple(builder.op_origins))


def _convert_node(ctx: Context, node: Node, target) -> None:
    if _is(node, QUANTIZE):
        _convert_quantize(ctx, node)
        return
    if node.target.__name__ == "getitem":
        raise ConversionError(f"{node.name}: output of {node.args[0]} is not supported")
    conv = lookup(node.target)
    if conv is None:
        raise ConversionError(f"{node.name}: no TFLite converter for {node.target}")
    reason = conv.rejection(node, target)
    if reason is not None:
        raise ConversionError(f"{node.name} ({node.target}): {reason}")
    conv.convert(ctx, node)


@contextmanager
def _converting(name: str):
    """Any failure converting node ``name`` is a ``ConversionError`` naming it, so the
    partitioner can leave that node to the CPU (a converter's own bug included)."""
    try:
        yield
    except ConversionError as exc:
        if exc.node is None:
            exc.node = name
        raise
    except Exception as exc:  # noqa: BLE001  (numpy, flatbuffers and torch raise any type)
        raise ConversionError(f"{name}: {type(exc).__name__}: {first_line(exc)}",
                              node=name) from exc


def _prefers_channels_last(node: Node) -> bool:
    seen, todo = set(), list(node.users)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.target in CHANNELS_LAST_OPS:
            return True
        if _is(n, QUANTIZE + DEQUANTIZE):
            todo.extend(n.users)
    return False


def dim_order_of(node: Node) -> tuple[int, ...]:
    """The dim order the .pte gives this boundary tensor (ExecuTorch reads it off strides)."""
    from executorch.exir.tensor import dim_order_from_stride

    return tuple(int(d) for d in dim_order_from_stride(node.meta["val"].stride()))


def _boundary_layout(ctx: Context, node: Node, shape, preferred, *,
                     is_input: bool) -> tuple[int, ...]:
    """The layout the target's runtime hands the NPU for boundary tensor ``node``: the one
    the graph prefers when the runtime delivers it, except where that means the Neutron
    runtime transposing on the CPU and the NPU can transpose instead (``_npu_transposes``)."""
    if ctx.target is None:
        return preferred
    dim_order = dim_order_of(node)
    try:
        perm = choose_layout(ctx.target.npu, shape, dim_order, preferred, node.name)
    except InvalidProgramError as exc:
        raise ConversionError(str(exc)) from None
    plain = layout.identity(len(shape))
    if _npu_transposes(ctx, shape, dim_order, perm, preferred, is_input):
        return plain
    return perm


def _npu_transposes(ctx: Context, shape, dim_order, perm, preferred, is_input: bool) -> bool:
    """Whether a Neutron boundary tensor the runtime would transpose on the CPU (format flag
    set, ``perm`` not the tensor's memory order) is better handed over as it lies, with a
    TRANSPOSE in the graph: when the Neutron converter takes that TRANSPOSE
    (``NeutronLimits.takes_transpose``). Ethos-U graphs transpose in any case (its runtime
    only copies)."""
    limits = ctx.target.npu.limits
    plain = layout.identity(len(shape))
    if not ctx.target.npu.runtime_transposes_io or limits is None \
            or tuple(dim_order) != plain or layout.same_memory_order(shape, perm, plain):
        return False
    src, dst = (plain, tuple(preferred)) if is_input else (tuple(preferred), plain)
    return limits.takes_transpose(layout.permute_shape(shape, src), layout.relative(src, dst))


def _convert_input(ctx: Context, node: Node) -> IOSpec:
    shape = shape_of(node)
    preferred = layout.channels_last(len(shape)) if _prefers_channels_last(node) else \
        layout.identity(len(shape))
    perm = _boundary_layout(ctx, node, shape, preferred, is_input=True)
    is_float = node.meta["val"].dtype.is_floating_point
    readers = [u for u in node.users if _is(u, QUANTIZE if is_float else DEQUANTIZE)]
    if not readers or len(readers) != len(node.users):
        raise ConversionError(f"input {node.name} is not read through quantize/dequantize")
    q = ctx.qparams(readers[0])
    value = ctx.new_value(node.name, shape, q, perm)
    ctx.values[node] = value
    if is_float:
        for r in readers:
            if not ctx.qparams(r).same_as(q):
                raise ConversionError(f"input {node.name} is quantized in two different ways")
            ctx.values[r] = value
    return _io_spec(node.name, value, is_float, dim_order=dim_order_of(node))


def _convert_output(ctx: Context, arg, i: int) -> IOSpec:
    if not isinstance(arg, Node):
        raise ConversionError(f"output {i} is not a tensor")
    value = ctx.value(arg)
    if value.is_const or value.q is None:
        raise ConversionError(f"output {i} ({arg.name}) is not a quantized activation")
    perm = _boundary_layout(ctx, arg, value.shape, value.perm, is_input=False)
    return _io_spec(arg.name, value, _is(arg, DEQUANTIZE), ctx.tensor(value, perm), perm,
                    dim_order_of(arg))


def _io_spec(name: str, value: Value, outside: bool, index: int | None = None,
             perm=None, dim_order=None) -> IOSpec:
    return IOSpec(
        name=name, index=value.tensor if index is None else index, shape=value.shape,
        perm=value.perm if perm is None else tuple(perm),
        dtype=str(value.dtype), scale=value.q.scale[0], zero_point=value.q.zero_point[0],
        quantized_outside=outside, dim_order=dim_order,
    )


def _convert_quantize(ctx: Context, node: Node) -> None:
    """A quantize inside a partition whose parameters differ from its input's: a requantize."""
    value = ctx.value(node.args[0])
    q = ctx.qparams(node)
    if value.is_const:  # a constant folds into int8 data
        real = value.data
        if value.q is not None:
            real = (real.astype(np.float64) - np.asarray(value.q.zero_point)) * \
                np.asarray(value.q.scale)
        ctx.values[node] = ctx.const_value(real, q)
        return
    if q.same_as(value.q):
        ctx.values[node] = value
        return
    out = ctx.new_value(node.name, value.shape, q, value.perm)
    ctx.op(OP.QUANTIZE, [ctx.tensor(value)], [out.tensor])
    ctx.values[node] = out

