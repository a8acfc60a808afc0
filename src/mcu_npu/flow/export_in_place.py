"""The ExportedProgram ``torch.export.export`` gives for a converted PT2E reference, built from
the reference's own graph instead of re-tracing it.

The reference is an exported graph already (``torch.export`` then PT2E's convert): every node
is an ATen or quantized-decomposed op, its weights are module attributes. Re-exporting it only
lifts those attributes to inputs, renames the nodes after their ops and attaches fake values,
but it re-traces every node to do so: on an unrolled recurrent graph of thousands of nodes
that is a quarter of the compile. ``export_in_place`` makes the same program directly: the
module's parameters, then its buffers, become inputs in ``named_parameters`` /
``named_buffers`` order with export's ``p_`` / ``b_`` names, the nodes are named as a trace
names them, and fake values come from one propagation. It returns None, for ``torch.export``
to do the work, on anything else: a call that is not an op, an attribute that is neither a
parameter nor a persistent buffer, a non-tensor input, an output that is not a flat tuple of
tensors.
"""

from __future__ import annotations

import operator

import torch
from torch.export import ExportedProgram
from torch.export.exported_program import ModuleCallEntry, ModuleCallSignature
from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec,
                                          OutputKind, OutputSpec, TensorArgument)
from torch.fx import GraphModule

from ..upstream.private import FakeTensorMode, TrainingIRVerifier, detect_fake_mode, pytree
from ..graph.fake_values import propagate

_KEPT_META = ("stack_trace", "custom")
"""What export carries from a node to the node it traces it into (``custom`` holds the
project's node ids, ``graph.ids``)."""


def _kept_meta(node) -> dict:
    meta = {k: node.meta[k] for k in _KEPT_META if k in node.meta}
    if "custom" in meta:  # export drops the markers torch's dynamo leaves there
        meta["custom"] = {k: v for k, v in meta["custom"].items()
                          if not k.startswith("_torchdynamo")}
    return meta


def export_in_place(reference: GraphModule, example_inputs: tuple) -> ExportedProgram | None:
    """``torch.export.export(reference, example_inputs)`` without the re-trace, or None when
    ``reference`` holds anything only a trace handles."""
    info = getattr(reference.graph._codegen, "pytree_info", None)
    if not _plain(reference, info, example_inputs):
        return None
    params = dict(reference.named_parameters())
    buffers = dict(reference.named_buffers())
    lifted = {**{k: ("p_", InputKind.PARAMETER) for k in params},
              **{k: ("b_", InputKind.BUFFER) for k in buffers}}
    if any(n.op == "get_attr" and n.target not in lifted for n in reference.graph.nodes):
        return None
    copied = _lifted_copy(reference, info, lifted)
    if copied is None:
        return None
    graph, specs = copied
    state = {**params, **buffers}
    if not _propagate(graph, [*state.values(), *example_inputs]):
        return None
    out_specs = [OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(o.name), None)
                 for o in graph.output_node().args[0]]
    call = ModuleCallEntry("", ModuleCallSignature(
        inputs=[], outputs=[], in_spec=info.in_spec, out_spec=info.out_spec,
        forward_arg_names=list(info.orig_args)))
    return ExportedProgram(root=torch.nn.Module(), graph=graph,
                           graph_signature=ExportGraphSignature(specs, out_specs),
                           state_dict=state, range_constraints={}, module_call_graph=[call],
                           verifiers=[TrainingIRVerifier])


def _plain(reference: GraphModule, info, example_inputs: tuple) -> bool:
    """``reference`` has export's calling convention for these tensor inputs, calls only ops,
    and keeps no non-persistent buffer (export makes those constants)."""
    if info is None or info.in_spec is None or info.out_spec is None:
        return False
    if not all(isinstance(x, torch.Tensor) for x in example_inputs) \
            or pytree.tree_structure((tuple(example_inputs), {})) != info.in_spec:
        return False
    if any(m._non_persistent_buffers_set for m in reference.modules()):
        return False
    for node in reference.graph.nodes:
        if node.op in ("call_module", "call_method"):
            return False
        if node.op == "call_function" and not (
                isinstance(node.target, torch._ops.OpOverload) or node.target is operator.getitem):
            return False
    return sum(n.op == "placeholder" for n in reference.graph.nodes) == len(example_inputs)


def _lifted_copy(reference: GraphModule, info, lifted: dict):
    """(the graph with the attributes as leading inputs and the nodes named as a trace names
    them, its input specs), or None when its output is not a flat tuple of distinct ops."""
    graph = torch.fx.Graph()
    env: dict = {}
    attr_nodes: dict[str, torch.fx.Node] = {}
    specs: list[InputSpec] = []
    for fqn, (prefix, kind) in lifted.items():
        ph = graph.placeholder(prefix + fqn.replace(".", "_"))
        attr_nodes[fqn] = ph
        specs.append(InputSpec(kind, TensorArgument(ph.name), fqn,
                               True if kind == InputKind.BUFFER else None))
    user = [n for n in reference.graph.nodes if n.op == "placeholder"]
    for node, name in zip(user, _arg_names(info, user)):
        ph = graph.placeholder(name)
        if ph.name != name:  # a builtin's name: export keeps the argument's own name
            ph.name = ph.target = name
        ph.meta.update(_kept_meta(node))
        env[node] = ph
        specs.append(InputSpec(InputKind.USER_INPUT, TensorArgument(ph.name), None))
    outputs = None
    for node in reference.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "get_attr":
            env[node] = attr_nodes[node.target]
            continue
        args = torch.fx.node.map_arg(node.args, env.__getitem__)
        kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
        if node.op == "output":
            outputs = args[0]
            continue
        new = graph.create_node("call_function", node.target, args, kwargs,
                                name=graph._target_to_str(_name_of(node.target)))
        new.meta.update(_kept_meta(node))
        env[node] = new
    flat = list(outputs) if isinstance(outputs, (list, tuple)) else None
    if flat is None or not all(isinstance(o, torch.fx.Node) for o in flat) \
            or len(set(flat)) != len(flat) or any(o.op == "placeholder" for o in flat):
        return None
    graph.output(tuple(flat))
    return graph, specs


def _propagate(graph: torch.fx.Graph, inputs: list[torch.Tensor]) -> bool:
    """Attach every node's fake value, as the trace would; False when an op gives none.
    The graph is interpreted on its own: the ExportedProgram makes its GraphModule (and its
    Python code) once, afterwards."""
    fake_mode = detect_fake_mode() or FakeTensorMode(allow_non_fake_inputs=True)
    with fake_mode:
        fakes = [fake_mode.from_tensor(t, static_shapes=True) for t in inputs]
    try:
        propagate(graph, fake_mode, *fakes)
    except Exception:  # an op fake tensors cannot run: leave it to the trace
        return False
    graph.output_node().meta.pop("val", None)
    return all(isinstance(n.meta.get("val"), (torch.Tensor, tuple, list))
               for n in graph.nodes
               if n.op == "call_function" and n.target is not operator.getitem)


def _arg_names(info, user) -> list[str]:
    """The user inputs' names as export gives them: the forward's argument names."""
    names = list(info.orig_args)
    return names if len(names) == len(user) else [n.name for n in user]


def _name_of(target):
    """What a trace names a call of ``target`` after (its op's name without the overload)."""
    if isinstance(target, torch._ops.OpOverload):
        return target.overloadpacket
    return target
