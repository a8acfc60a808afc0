"""A readable dump of a TFLite model: one line per operator with shapes, types and
quantization. Tests compare a few expected lines against it to catch stray transposes."""

from __future__ import annotations

from ai_edge_litert import schema_py_generated as schema

from .builder import BUILTIN_NAMES, NUMPY_TYPES


def load_model(buffer: bytes) -> schema.ModelT:
    return schema.ModelT.InitFromObj(schema.Model.GetRootAs(buffer, 0))


def _tensor(t: schema.TensorT) -> str:
    dtype = NUMPY_TYPES.get(t.type)
    text = f"{dtype.name if dtype is not None else t.type}{[int(d) for d in t.shape] if t.shape is not None else []}"
    q = t.quantization
    if q is not None and q.scale is not None and len(q.scale):
        if len(q.scale) == 1:
            text += f" q({q.scale[0]:.6g},{int(q.zeroPoint[0])})"
        else:
            text += f" q(per-axis {q.quantizedDimension}, {len(q.scale)} scales)"
    if t.buffer:
        text += " const"
    return text


def op_names(buffer: bytes) -> list[str]:
    """Builtin (or custom) operator name of every operator, in order (read through the
    flatbuffer's accessors: no object-API copy of the weights)."""
    model = schema.Model.GetRootAs(buffer, 0)
    graph = model.Subgraphs(0)
    names = []
    for k in range(graph.OperatorsLength()):
        code = model.OperatorCodes(graph.Operators(k).OpcodeIndex())
        custom = code.CustomCode()
        names.append(custom.decode() if custom else BUILTIN_NAMES[code.BuiltinCode()])
    return names


def describe(buffer: bytes) -> str:
    """``OP(in, ...) -> out`` per operator, then the graph inputs and outputs."""
    model = load_model(buffer)
    g = model.subgraphs[0]
    lines = []
    for name, op in zip(op_names(buffer), g.operators):
        ins = ", ".join(_tensor(g.tensors[i]) for i in op.inputs if i >= 0)
        outs = ", ".join(_tensor(g.tensors[i]) for i in op.outputs)
        lines.append(f"{name}({ins}) -> {outs}")
    lines.append("inputs: " + ", ".join(_tensor(g.tensors[i]) for i in g.inputs))
    lines.append("outputs: " + ", ".join(_tensor(g.tensors[i]) for i in g.outputs))
    return "\n".join(lines)
