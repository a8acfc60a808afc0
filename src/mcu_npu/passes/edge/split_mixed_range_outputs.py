"""SplitMixedRangeOutputs: an output assembled in float on the CPU from parts of different
ranges (``passes.aten.KeepMixedRangeCatFloat``) becomes one program output per part.

Before::

    b = dequantize_per_tensor(npu[0], 0.8, -128, ...)      # boxes, pixels
    s = dequantize_per_tensor(npu[1], 0.0039, -128, ...)   # scores in [0, 1]
    return (cat([b, s], 1),)                                # f32[1, 7, 189], on the CPU

After::

    return (b, s)                                           # f32[1, 4, 189], f32[1, 3, 189]

The float tail (cats, views, permutes between the parts and the output) leaves the program:
no CPU copy and no float buffer of the whole output on the device. ``self.assemble`` says
how to put the model's outputs back together from the program's (``device.output_parts``,
run by the host's ``run``): per model output an expression of ``{"part": k}``,
``{"cat": [...], "dim": d}``, ``{"view": e, "shape": [...]}`` and ``{"permute": e, "dims":
[...]}``; ``self.parts`` names each program output. Nothing changes in a program where no
output is made that way. Runs on the final Edge program, before the int8 I/O passes (each
part then gets its own int8 parameters).
"""

from __future__ import annotations

from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind, OutputSpec, TensorArgument
from torch.fx import Node

from mcu_npu.graph.ids import node_id
from mcu_npu.passes.edge._io import DEQUANTIZE, op_key, set_outputs, user_outputs
from ...graph.schema import bind

_CAT = "aten.cat.default"
_VIEWS = {"aten.view_copy.default", "aten.view.default", "aten._unsafe_view.default",
          "aten.reshape.default"}
_PERMUTES = {"aten.permute_copy.default", "aten.permute.default"}
_PASS = {"aten.clone.default", "dim_order_ops._clone_dim_order.default"}


class SplitMixedRangeOutputs(ExportedProgramPassBase):
    def __init__(self):
        self.assemble: list[dict] = []
        self.parts: list[dict] = []
        self.removed: list[str] = []  # the ATen node ids of the float tail's nodes

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        graph = exported_program.graph_module.graph
        output, values, specs, user = user_outputs(exported_program)
        if not user or user != list(range(user[0], len(specs))):
            return ExportedProgramPassResult(exported_program, False)
        parts: list[Node] = []
        exprs = []
        for index, position in enumerate(user):
            node = values[position]
            leaves: list[Node] = []
            expr = _expression(node, leaves) if isinstance(node, Node) else None
            if expr is None or len(leaves) < 2:
                leaves, expr = [node], {"part": None}
            exprs.append((index, expr, leaves))
        if all("part" in e for _, e, _ in exprs):
            return ExportedProgramPassResult(exported_program, False)
        self.assemble, self.parts = [], []
        for index, expr, leaves in exprs:
            numbers = {}
            for leaf in leaves:
                numbers[leaf] = len(parts)
                parts.append(leaf)
                name = f"output_{index}" if len(leaves) == 1 else \
                    f"output_{index}.part_{len(numbers) - 1}"
                self.parts.append({"name": name, "output": index,
                                   "shape": list(getattr(leaf, "meta", {}).get(
                                       "val", _NoShape).shape)})
            self.assemble.append(_numbered(expr, numbers, leaves[0]))
        tail = _ancestors([values[p] for p in user])
        set_outputs(output, values[:user[0]] + parts)
        del specs[user[0]:]
        specs += [OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(name=p.name), None)
                  for p in parts]
        for node in reversed(list(graph.nodes)):
            if node.op == "call_function" and not node.users and node in tail:
                self.removed.append(node_id(node) or node.name)
                graph.erase_node(node)
        exported_program.graph_module.recompile()
        return ExportedProgramPassResult(exported_program, True)


class _NoShape:
    shape = ()


def _expression(node: Node, leaves: list) -> dict | None:
    """How ``node`` is made from the dequantized parts of its float tail (``leaves``); None
    when the tail holds anything but data movement (then the output stays as it is)."""
    key = op_key(node)
    if key == _CAT:
        dim = bind(node).dim
        parts = [_expression(p, leaves) for p in node.args[0]]
        return None if any(p is None for p in parts) else {"cat": parts, "dim": dim}
    if key in _VIEWS | _PERMUTES | _PASS:
        inner = _expression(node.args[0], leaves)
        return inner if inner is None or key in _PASS else _wrap(key, node, inner)
    if op_key(node) not in DEQUANTIZE or not _is_float(node):
        return None
    if node not in leaves:
        leaves.append(node)
    return {"part": node}


def _wrap(key: str, node: Node, inner: dict) -> dict:
    if key in _VIEWS:
        return {"view": inner, "shape": [int(s) for s in node.args[1]]}
    return {"permute": inner, "dims": [int(d) for d in node.args[1]]}


def _is_float(node: Node) -> bool:
    val = node.meta.get("val")
    return getattr(val, "dtype", None) is not None and val.dtype.is_floating_point


def _numbered(expr: dict, numbers: dict, only) -> dict:
    """``expr`` with its leaf nodes replaced by their program output numbers."""
    if "part" in expr:
        return {"part": numbers[expr["part"] if expr["part"] is not None else only]}
    if "cat" in expr:
        return {"cat": [_numbered(e, numbers, only) for e in expr["cat"]], "dim": expr["dim"]}
    key = "view" if "view" in expr else "permute"
    return {**expr, key: _numbered(expr[key], numbers, only)}


def _ancestors(nodes) -> set:
    seen: set = set()
    todo = [n for n in nodes if isinstance(n, Node)]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo += n.all_input_nodes
    return seen
