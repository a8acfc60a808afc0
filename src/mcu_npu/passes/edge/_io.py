"""What the program-I/O passes share: matching the boundary quantize/dequantize ops, reading
and setting the program's outputs, and the record of one int8 program input or output."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind
from torch.fx import Node

# quantize/dequantize with constant qparams, before and after the Cortex-M lowering (which
# swaps the portable ops for cortex_m ones with the same arguments)
QUANTIZE = frozenset({"quantized_decomposed.quantize_per_tensor.default",
                      "cortex_m.quantize_per_tensor.default"})
DEQUANTIZE = frozenset({"quantized_decomposed.dequantize_per_tensor.default",
                        "cortex_m.dequantize_per_tensor.default"})


@dataclass(frozen=True)
class IOQuantization:
    """One program input or output: made integer, ``real = scale * (q - zero_point)`` with
    ``q`` in ``[quant_min, quant_max]`` of ``dtype``; or left as it was (a non-float or unused
    tensor: no scale). ``index`` counts user inputs or user outputs; ``name`` is the model's
    argument name for an input, ``output_<index>`` for an output."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    scale: float | None = None
    zero_point: int | None = None
    quant_min: int | None = None
    quant_max: int | None = None

    def as_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": dtype_name(self.dtype),
                "scale": self.scale, "zero_point": self.zero_point,
                "quant_min": self.quant_min, "quant_max": self.quant_max}


def op_key(node: Node) -> str:
    """``namespace.op.overload`` of a call (Edge and ATen overloads alike), else ""."""
    if node.op != "call_function":
        return ""
    name = getattr(node.target, "__name__", "")
    namespace = getattr(node.target, "namespace", "")
    if namespace and not name.startswith(namespace + "."):
        name = f"{namespace}.{name}"
    return name


def describe(node: Node) -> str:
    """How a node reads in a message: its op without the overload, else its kind."""
    key = op_key(node)
    if key:
        return key.rsplit(".", 1)[0] if key.count(".") >= 2 else key
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target))
    return {"output": "the program output", "placeholder": "a program input"}.get(node.op,
                                                                                node.op)


def qparams(node: Node) -> tuple[float, int, int, int, torch.dtype]:
    """(scale, zero_point, quant_min, quant_max, dtype) of a per-tensor quantize/dequantize."""
    scale, zero_point, quant_min, quant_max, dtype = node.args[1:6]
    return float(scale), int(zero_point), int(quant_min), int(quant_max), dtype


def as_is(index: int, name: str, node: Node) -> IOQuantization | None:
    """The record of a tensor input/output the pass leaves unchanged (None if no tensor)."""
    val = node.meta.get("val") if isinstance(node, Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    return IOQuantization(index, name, tuple(val.shape), val.dtype)


def is_float(node: Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype.is_floating_point


def dtype_name(dtype) -> str:
    """``int8`` for ``torch.int8``."""
    return str(dtype).removeprefix("torch.")


def user_outputs(exported_program: ExportedProgram) -> tuple[Node, list, list, list[int]]:
    """(the graph's output node, a list of the values it returns, the signature's output
    specs themselves (edited in place by the caller), the positions of the user outputs
    among them)."""
    output = exported_program.graph_module.graph.output_node()
    specs = exported_program.graph_signature.output_specs
    user = [i for i, s in enumerate(specs) if s.kind == OutputKind.USER_OUTPUT]
    return output, list(output.args[0]), specs, user


def set_outputs(output: Node, values) -> None:
    """Make ``values`` what graph output node ``output`` returns, its fake values alike."""
    output.args = (type(output.args[0])(values),)
    if isinstance(output.meta.get("val"), (list, tuple)):
        output.meta["val"] = type(output.meta["val"])(
            v.meta.get("val") if isinstance(v, Node) else v for v in output.args[0])
