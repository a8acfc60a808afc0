"""FoldConstants: a computation whose inputs are all constants is a constant, computed once here.

Before::

    t = expand(cls_token, [2, -1, -1])                  # a learned class token, batch of 2
    y = cat([t, x], 1)
    b = index(attention_biases, [None, bias_idxs])     # a bias table read through an index buffer
    w = reshape_as(batch_norm(reshape(weight, [1, C, -1]), training=True), weight)
    z = conv2d(x, w, bias)                              # a weight-standardised convolution

After::

    y = cat([_mcu_npu_folded_expand, x], 1)            # get_attr: the value, computed once
    b = _mcu_npu_folded_index
    z = conv2d(x, _mcu_npu_folded_reshape_as, bias)    # a plain weight, quantized per channel

A node is constant when it is a parameter or buffer (``get_attr``), or an ATen call whose every
tensor input is constant (a creation op such as ``arange``, ``zeros`` or ``full`` has none).
Each constant read by a node that is not constant is evaluated in PyTorch, on the module's
own values, and replaced by a ``get_attr`` of the result: the input attribute that holds it
already (an expand to a batch of one), else a new parameter of the module when it is computed
from parameters (so quantization-aware training still trains it), a buffer otherwise. The
ops that made it are removed, and so are the attributes only they read. Such ops (expand,
index, bitwise_not, batch norm on a weight, ...) have no int8 form, and a convolution's
weight must be a constant for per-channel quantization.

An in-place op on a tensor the graph has just made (``zeros_like(m).masked_fill_(m, -inf)``,
as ``nn.MultiheadAttention`` turns a boolean padding mask into an additive one) is first made
its functional form, read by every later reader of that tensor, so it folds like any other op;
``detach_`` changes no value and does not make what it reads a run-time value. Boolean
reductions (``any``, ``all``), comparisons (``eq``) and ``expand`` of constants fold like any
other op, so a mask built from a constant padding mask is one constant.

A scalar read out of a constant (``stride[i].item()``, as a detector's anchor grid reads its
stride buffer into ``full``) is a constant too: its readers get the number itself. Left in,
it is a data-dependent symbol that every later propagation of fake values trips on.

Not folded: random ops; ops that mutate an input (in place, or a training-mode batch norm
that updates its running statistics) and whatever reads an attribute they mutate; ops outside
the ``aten`` namespace (quantize / dequantize, custom ops); uninitialised ``empty`` tensors;
results without a static shape or that are not tensors; the recurrent passes' state values
(``STATE_KEY``, which the quantizer groups). A ``zeros`` / ``ones`` / ``full`` read directly at
run time stays as it is: the converter folds ``full``, and ``FoldLinearOfZeros`` recognizes a
zero state by it. Bound: a result is folded only if it has at most ``MAX_ELEMENTS`` elements
(2**18: 256 KiB as int8) or at most ``MAX_GROWTH`` (4) times the elements of its tensor
inputs, so a broadcast the run-time op would do for free is not stored large.
"""

from __future__ import annotations

import math
import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from ...upstream.private import detect_fake_mode, pytree
from mcu_npu.graph.schema import bind
from mcu_npu.passes.aten._recurrent import STATE_KEY, finish

aten = torch.ops.aten

_SCALARS = {aten.item, aten._local_scalar_dense}
"""Ops reading a tensor's one element out as a Python number."""

MAX_ELEMENTS = 1 << 18
MAX_GROWTH = 4

_UNINITIALISED = {aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty,
                  aten.new_empty_strided, aten.empty_permuted}
_FILLED = {aten.zeros, aten.ones, aten.full, aten.zeros_like, aten.ones_like, aten.full_like,
           aten.new_zeros, aten.new_ones, aten.new_full, aten.scalar_tensor}
_BATCH_NORMS = {aten.batch_norm, aten.instance_norm, aten._native_batch_norm_legit,
                aten.native_batch_norm, aten._batch_norm_impl_index}


class FoldConstants(PassBase):
    """Replace every constant that a run-time node reads by a ``get_attr`` of its value."""

    def call(self, graph_module: GraphModule) -> PassResult:
        functionalized = _functionalize_fresh(graph_module)
        values: dict[Node, object] = {}
        trainable: dict[Node, bool | None] = {}  # None: no parameter among its inputs
        mutated = _mutated_attrs(graph_module)
        for node in graph_module.graph.nodes:
            if node.op == "get_attr" and node.target not in mutated:
                value = _attr(graph_module, node.target)
                if isinstance(value, torch.Tensor):
                    values[node] = value
                    trainable[node] = value.requires_grad \
                        if isinstance(value, torch.nn.Parameter) else None
            elif node.op == "call_function" and _foldable(node, values):
                value = _evaluate(node, values)
                if value is not None:
                    values[node] = value
                    flags = [trainable[n] for n in node.all_input_nodes
                             if trainable[n] is not None]
                    trainable[node] = any(flags) if flags else None
        read_attrs = {n.target for n in graph_module.graph.nodes if n.op == "get_attr"}
        mode = detect_fake_mode([n.meta["val"] for n in graph_module.graph.nodes
                                 if isinstance(n.meta.get("val"), torch.Tensor)])
        modified = functionalized
        for node in list(values):
            if node.op == "call_function" and _scalar(node) and \
                    not all(u in values for u in node.users):
                for user in [u for u in node.users if u not in values]:
                    user.replace_input_with(node, values[node])
                modified = True
                continue
            if node.op != "call_function" or all(u in values for u in node.users) or \
                    _filled(node) or not isinstance(values[node], torch.Tensor):
                continue  # read only by constants, a filled tensor, or not a tensor
            node.replace_all_uses_with(_constant_node(graph_module, node, values[node],
                                                      trainable[node], mode))
            modified = True
        if modified:
            graph_module.graph.eliminate_dead_code(is_impure_node=_impure)
            kept = {n.target for n in graph_module.graph.nodes if n.op == "get_attr"}
            for target in read_attrs - kept:
                _delete_attr(graph_module, target)
            finish(graph_module)
        return PassResult(graph_module, modified)


_VALUE_PRESERVING = {aten.detach_}
"""In-place ops that change no value (only autograd state)."""


def _impure(node: Node) -> bool:
    """Kept by dead-code elimination although unread: a value-preserving in-place op is not."""
    if getattr(node.target, "overloadpacket", None) in _VALUE_PRESERVING:
        return False
    return node.is_impure()


def _functionalize_fresh(gm: GraphModule) -> bool:
    """Replace each in-place op on a tensor a creation op made in the graph (``zeros_like``,
    ``full``, ...) by its functional form, read instead of that tensor by every node after it.
    True if any was replaced."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    changed = False
    for node in list(gm.graph.nodes):
        fresh = node.args[0] if node.op == "call_function" and node.args else None
        functional = _functional_form(node.target)
        if functional is None or not isinstance(fresh, Node) or not _filled(fresh) or \
                any(_aliases(u) for u in fresh.users if u is not node):
            continue
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(functional, node.args, node.kwargs)
        new.meta.update(node.meta)
        for user in list(fresh.users):
            if user is not node and user is not new and order.get(user, -1) > order[node]:
                user.replace_input_with(fresh, new)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        changed = True
    return changed


def _functional_form(op):
    """The functional overload of in-place ATen op ``op`` (``masked_fill_.Scalar`` ->
    ``masked_fill.Scalar``), or None."""
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
        return None
    name = op.overloadpacket.__name__
    if not name.endswith("_") or name.startswith("_") or not op._schema.is_mutable:
        return None
    packet = getattr(aten, name[:-1], None)
    overload = getattr(packet, op._overloadname, None) if packet is not None else None
    return overload if isinstance(overload, torch._ops.OpOverload) and \
        not overload._schema.is_mutable else None


def _aliases(node: Node) -> bool:
    """``node``'s output may share storage with an input (a view)."""
    op = node.target
    return not isinstance(op, torch._ops.OpOverload) or \
        any(r.alias_info is not None for r in op._schema.returns)


def _mutated_attrs(gm: GraphModule) -> set[str]:
    """Attributes an op of the graph updates in place: not constants, each run reads anew."""
    mutated = set()
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and \
                node.target.overloadpacket not in _VALUE_PRESERVING and \
                (node.target._schema.is_mutable or _updates_statistics(node)):
            mutated |= {n.target for n in node.all_input_nodes if n.op == "get_attr"}
    return mutated


def _foldable(node: Node, values: dict) -> bool:
    """An ATen call (or a getitem) on constants alone that may be computed once, here."""
    if any(n not in values for n in node.all_input_nodes) or STATE_KEY in node.meta:
        return False
    if node.target is operator.getitem:
        return True
    if _scalar(node):
        return True
    op = node.target
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten" or \
            (op._schema.is_mutable and op.overloadpacket not in _VALUE_PRESERVING) or \
            torch.Tag.nondeterministic_seeded in op.tags or \
            op.overloadpacket in _UNINITIALISED or _updates_statistics(node):
        return False
    size = _elements(node.meta.get("val"))
    if size is None:
        return False
    inputs = sum(values[n].numel() for n in node.all_input_nodes
                 if isinstance(values[n], torch.Tensor))
    return size <= max(MAX_ELEMENTS, MAX_GROWTH * inputs)


def _scalar(node: Node) -> bool:
    """A read of a tensor's element as a number (``item``)."""
    return getattr(node.target, "overloadpacket", None) in _SCALARS


def _filled(node: Node) -> bool:
    """A tensor of one value, made in the graph."""
    return getattr(node.target, "overloadpacket", None) in _FILLED


def _updates_statistics(node: Node) -> bool:
    """A training-mode batch norm given running statistics updates them in place."""
    if node.target.overloadpacket not in _BATCH_NORMS:
        return False
    a = vars(bind(node))
    training = a.get("training", a.get("use_input_stats", False))
    return bool(training) and any(a.get(k) is not None for k in ("running_mean", "running_var"))


def _elements(val) -> int | None:
    """Elements of a tensor or tuple of tensors of static shape; None for anything else."""
    vals = val if isinstance(val, (list, tuple)) else [val]
    if not vals or not all(isinstance(v, torch.Tensor) for v in vals) or \
            not all(isinstance(d, int) for v in vals for d in v.shape):
        return None
    return sum(math.prod(v.shape) for v in vals)


def _evaluate(node: Node, values: dict):
    """``node`` computed on its inputs' values; None when PyTorch cannot compute it here."""
    args, kwargs = pytree.tree_map_only(Node, lambda n: values[n], (node.args, node.kwargs))
    try:
        with torch.no_grad():
            value = node.target(*args, **kwargs)
    except Exception:  # an op that only runs on another device or under tracing: left as is
        return None
    if _scalar(node):
        return value if isinstance(value, (bool, int, float)) else None
    return pytree.tree_map_only(torch.Tensor, lambda t: t.detach(), value)


def _constant_node(gm: GraphModule, node: Node, value: torch.Tensor,
                   trainable: bool | None, mode) -> Node:
    """A ``get_attr`` of ``value`` before ``node``: an input attribute that holds it already,
    or a new one."""
    for arg in node.all_input_nodes:
        if arg.op == "get_attr":
            held = _attr(gm, arg.target)
            if held.shape == value.shape and held.dtype == value.dtype and \
                    held.is_contiguous() and torch.equal(held, value):
                return arg
    value = value.contiguous().clone()
    name = f"_mcu_npu_folded_{node.name}"
    while hasattr(gm, name):
        name += "_"
    if trainable is not None and value.dtype.is_floating_point:
        gm.register_parameter(name, torch.nn.Parameter(value, requires_grad=trainable))
    else:
        gm.register_buffer(name, value)
    with gm.graph.inserting_before(node):
        const = gm.graph.get_attr(name)
    const.meta["val"] = mode.from_tensor(value, static_shapes=True) if mode is not None \
        else value
    return const


def _attr(gm: GraphModule, target: str):
    return operator.attrgetter(target)(gm)


def _delete_attr(gm: GraphModule, target: str) -> None:
    owner, _, name = target.rpartition(".")
    module = gm.get_submodule(owner) if owner else gm
    if hasattr(module, name) and not isinstance(getattr(module, name), torch.nn.Module):
        delattr(module, name)
