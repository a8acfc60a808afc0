"""ATen -> Edge dialect in place, without re-tracing every node.

``to_edge`` runs some ten ExecuTorch passes that each re-trace the whole graph on fake
tensors. On a quantized graph of plain core-ATen ops all but two of them change nothing:
view ops become their ``_copy`` variants and every op becomes its Edge overload. An
unrolled recurrent graph holds thousands of nodes, and those re-traces are most of its
compile time. ``to_edge_in_place`` makes the same two rewrites on the graph as it is,
recomputes fake values only where an output layout changes (a view's copy is contiguous),
and runs the passes that edit the graph without re-tracing as ExecuTorch does. It returns
None, for ``to_edge`` to do the work, when any re-tracing pass would change more: integer
scalars given as tensors, mixed dtypes, symbolic shapes, memory-format ops or control flow.
A float given as a tensor beside float32 tensors (an attention scale, an epsilon) becomes
the constant ``to_edge`` would make, in place: transformers are full of them.
"""

from __future__ import annotations

import builtins
import keyword
import operator

import torch
from executorch.exir import EdgeCompileConfig, EdgeProgramManager
from executorch.exir.pass_base import map_args
from executorch.exir.passes import base_post_op_replace_passes, convert_constant_dim_order_pass
from executorch.exir.passes.dim_order_ops_registry import DimOrderOpsMap
from executorch.exir.passes.fold_redundant_qdq_pass import FoldRedundantDequantizeQuantizePass
from executorch.exir.passes.prune_empty_tensors_pass import PruneEmptyTensorsPass
from executorch.exir.passes.remove_graph_asserts_pass import RemoveNonCoreAtenOpGraphAssertsPass
from executorch.exir.passes.remove_noop_pass import RemoveNoopPass, RemoveToCopyPass
from executorch.exir.passes.remove_unused_parameters_pass import remove_unused_parameters_pass
from executorch.exir.passes.replace_aten_with_edge_pass import aten_to_edge, should_lower_to_edge
from executorch.exir.passes.replace_sym_size_op_pass import ReplaceSymSizeOpPass
from executorch.exir.verification.verifier import EXIREdgeDialectVerifier
from torch.export import ExportedProgram
from torch.fx import GraphModule, Node
from torch.fx.traceback import NodeSource

from ..upstream.private import (ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes,
                                get_updated_graph_signature, get_view_copy_of_view_op,
                                lift_constant_tensor_pass, pytree, transform_program)
from ..graph.schema import bind
from ..passes.aten._recurrent import fake_value

aten = torch.ops.aten

_ILLEGAL_NAMES = frozenset(keyword.kwlist) | frozenset(dir(builtins))

_PROMOTING = {  # the ops RemoveMixedTypeOperators casts inputs of, and how it promotes
    aten.add.Tensor: ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
    aten.mul.Tensor: ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
    aten.sub.Tensor: ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
    aten.div.Tensor: ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT,
    aten.div.Tensor_mode: ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
    aten.minimum.default: ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
}


def to_edge_in_place(ep: ExportedProgram, config: EdgeCompileConfig) -> EdgeProgramManager | None:
    """The Edge program ``to_edge(ep, config)`` gives for an already decomposed ``ep``, made
    by editing ``ep``'s graph; None (``ep`` untouched) when only re-tracing gives it."""
    if needs_retrace(ep.graph_module) is not None:
        return None
    ep = remove_unused_parameters_pass(ep)
    gm = ep.graph_module
    for graph_pass in (RemoveNonCoreAtenOpGraphAssertsPass(), ReplaceSymSizeOpPass()):
        gm = graph_pass(gm).graph_module
    _scalars_as_constants(gm)
    _views_as_copies(gm)
    for graph_pass in (RemoveNoopPass(), PruneEmptyTensorsPass(), RemoveToCopyPass(),
                       FoldRedundantDequantizeQuantizePass()):
        gm = graph_pass(gm).graph_module
    for node in gm.graph.nodes:
        if node.op == "call_function" and should_lower_to_edge(node.target):
            node.target = aten_to_edge(node.target)
            _clone_as_dim_order(node)
            node._rename(gm.graph._target_to_str(node.target))  # the name a re-trace gives
    _mark_sources(gm)  # gm's own code is stale now: the ExportedProgram makes its module anew
    edge = ExportedProgram(
        root=gm, graph=gm.graph,
        graph_signature=get_updated_graph_signature(ep.graph_signature, gm),
        state_dict=ep.state_dict, range_constraints=ep.range_constraints,
        module_call_graph=ep.module_call_graph, example_inputs=ep.example_inputs,
        constants=ep.constants,
        verifiers=[EXIREdgeDialectVerifier(edge_compile_config=config, class_only=True,
                                           preserve_ops=config.preserve_ops)],
    )
    edge = lift_constant_tensor_pass(edge)
    edge = convert_constant_dim_order_pass.convert_constant_dim_order_pass(edge)
    edge = transform_program(edge, *base_post_op_replace_passes)
    return EdgeProgramManager({"forward": edge}, None, config)


def _mark_sources(gm: GraphModule) -> None:
    """What a re-trace leaves on each node: a provenance entry (which ExecuTorch's debug
    handles are derived from), the output node's tuple of values, and inputs named so they
    shadow no Python builtin (``input`` becomes ``input_1``, as torch.fx names it anew)."""
    for node in gm.graph.nodes:
        if node.op == "placeholder" and node.name in _ILLEGAL_NAMES:
            node._rename(f"{node.name}_1")
        elif node.op == "output":
            node.meta["val"] = pytree.tree_map_only(Node, lambda n: n.meta.get("val"), node.args[0])
        elif node.op != "placeholder" and "from_node" not in node.meta:
            node.meta["from_node"] = [NodeSource(node, pass_name="to_edge_in_place")]


def needs_retrace(gm: GraphModule) -> str | None:
    """Why ``to_edge``'s re-tracing passes would change ``gm`` beyond op names, or None."""
    for node in gm.graph.nodes:
        if node.op == "call_module" or (node.op == "get_attr" and
                                        isinstance(getattr(gm, node.target, None), torch.nn.Module)):
            return f"{node.name} is a submodule (control flow)"
        if node.op not in ("call_function", "placeholder"):
            continue
        if any(isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) for v in _vals(node)):
            return f"{node.name} has a symbolic shape or value"
        if node.op == "placeholder" or node.target is operator.getitem:
            continue
        op = node.target
        if not isinstance(op, torch._ops.OpOverload):
            return f"{node.name} calls {op}, not an ATen operator"
        if should_lower_to_edge(op) and aten_to_edge(_copy_of(op)) in DimOrderOpsMap and \
                not _clone_as_dim_order(node, check_only=True):
            return f"{node.name} takes a memory format"
        reason = _scalar_for_tensor(node) or _mixed_dtypes(node)
        if reason:
            return reason
    return None


def _clone_as_dim_order(node: Node, check_only: bool = False) -> bool:
    """``MemoryFormatOpsPass`` on an Edge ``clone`` node: ``_clone_dim_order`` with the dim
    order of its memory format (the input's for ``preserve_format``). False (node untouched)
    for any other node or a memory format without a dim order (a re-trace decides those)."""
    if node.target not in (aten.clone.default, _EDGE_CLONE):
        return False
    kwargs = dict(node.kwargs)
    fmt = kwargs.pop("memory_format", torch.preserve_format)
    x = node.args[0].meta.get("val") if isinstance(node.args[0], Node) else None
    if len(node.args) != 1 or not isinstance(x, torch.Tensor) or \
            fmt not in (None, torch.preserve_format, torch.contiguous_format):
        return False
    if not check_only and node.target == _EDGE_CLONE:
        kwargs["dim_order"] = list(range(x.dim())) if fmt == torch.contiguous_format \
            else [int(d) for d in x.dim_order()]
        node.target, node.kwargs = DimOrderOpsMap[_EDGE_CLONE], kwargs
    return True


_EDGE_CLONE = aten_to_edge(aten.clone.default)


def _copy_of(op):
    if op == aten._unsafe_view.default:
        return aten.view_copy.default
    return get_view_copy_of_view_op(op._schema) or op


def _views_as_copies(gm: GraphModule) -> None:
    """View ops -> their ``_copy`` variants, with fake values recomputed where a layout changes
    and downstream of it (a copy is contiguous where its view was strided)."""
    changed: set[Node] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        copy = _copy_of(node.target) if isinstance(node.target, torch._ops.OpOverload) else node.target
        retarget = copy is not node.target
        if retarget:
            node.target = copy
        if retarget or any(arg in changed for arg in node.all_input_nodes):
            old = node.meta.get("val")
            new = fake_value(node.target, node.args, node.kwargs)
            if new is not None:
                node.meta["val"] = new
                if not _same_layout(old, new):
                    changed.add(node)


def _same_layout(a, b) -> bool:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return a is b
    return a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride()


def _vals(node: Node) -> list:
    vals = pytree.tree_leaves(node.meta.get("val"))
    return [s for v in vals if isinstance(v, torch.Tensor) for s in (*v.shape, *v.stride())] + vals


def _scalar_for_tensor(node: Node) -> str | None:
    """ScalarToTensorPass would turn a Python scalar passed as a Tensor argument into a
    constant, in a way ``_scalars_as_constants`` does not repeat (an int or bool, or a float
    beside tensors that are not all float32: casts would follow)."""
    bound = vars(bind(node))
    float32 = _float32_inputs(node)
    for arg in node.target._schema.arguments:
        value = bound[arg.name]
        if isinstance(value, (bool, int, float)) and isinstance(arg.type, torch.TensorType) \
                and not (type(value) is float and float32):
            return f"{node.name} passes the scalar {value!r} as tensor argument {arg.name}"
    return None


def _float32_inputs(node: Node) -> bool:
    vals = [a.meta.get("val") for a in node.all_input_nodes]
    return bool(vals) and all(isinstance(v, torch.Tensor) and v.dtype == torch.float32
                              for v in vals)


def _scalars_as_constants(gm: GraphModule) -> None:
    """ScalarToTensorPass in place: a float passed as a Tensor argument beside float32
    tensors (an attention scale, a normalization's epsilon) becomes a 0-dim float32 constant
    read by ``get_attr`` just before its user, which ``lift_constant_tensor_pass`` lifts to a
    buffer as it lifts the constants of a re-trace."""
    taken = {name for name, _ in gm.named_buffers()} | set(vars(gm))
    count = 0

    def constant(value, schema, node):
        nonlocal count
        if type(value) is not float or not isinstance(schema.type, torch.TensorType):
            return value
        while f"_tensor_constant{count}" in taken:
            count += 1
        name = f"_tensor_constant{count}"
        taken.add(name)
        tensor = torch.tensor(value)
        setattr(gm, name, tensor)
        with gm.graph.inserting_before(node):
            attr = gm.graph.create_node("get_attr", name)
        fake = node.all_input_nodes[0].meta["val"].fake_mode
        attr.meta["val"] = fake.from_tensor(tensor, static_shapes=True)
        return attr

    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) \
                or node.target is operator.getitem or not _float32_inputs(node):
            continue
        node.args, node.kwargs = map_args(node.target, lambda v, s: constant(v, s, node),
                                          node.args, dict(node.kwargs))


def _mixed_dtypes(node: Node) -> str | None:
    """RemoveMixedTypeOperators would cast an input of this elementwise op."""
    kind = _PROMOTING.get(node.target)
    if kind is None or len(node.args) <= 1:
        return None
    if node.target == aten.div.Tensor_mode and node.kwargs.get("rounding_mode") is None:
        kind = ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT
    vals = [a.meta.get("val") if isinstance(a, Node) else a for a in node.args]
    if any(v is None for v in vals):
        return f"{node.name} has an input of unknown dtype"
    promoted = elementwise_dtypes(*vals, type_promotion_kind=kind)[1]
    if any(isinstance(v, torch.Tensor) and v.dtype != promoted for v in vals):
        return f"{node.name} mixes input dtypes"
    return None
