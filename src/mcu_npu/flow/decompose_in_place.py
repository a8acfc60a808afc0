"""Core-ATen decompositions that rewrite a node into at most two, done on the graph as it is.

``to_edge``'s decomposition re-traces the whole program on fake tensors as soon as one op in
it decomposes, and the Edge passes after it then re-trace it again (``flow.edge_dialect``): an
attention block's ``transpose`` or ``softmax`` costs two re-traces of a graph holding
hundreds of quantize / dequantize nodes. Each op below decomposes into a single other op
with the same value (shape, dtype and strides), so the node is retargeted in place, to the
op and arguments the decomposition produces:

=====================================  =========================================
``zeros(size)``                        ``full(size, 0, dtype, layout, ...)``
``transpose.int(x, a, b)``             ``permute(x, dims with a and b swapped)``
``squeeze.dim(x, d)``                  ``squeeze.dims(x, [d])``
``unflatten.int(x, d, sizes)``         ``view(x, output shape)``
``softmax.int(x, d)``                  ``_softmax(x, d, False)``
``contiguous(x)``                      ``clone(x, memory_format=contiguous_format)``
``dropout(x, p, train=False)``         ``clone(x)``
``flatten.using_ints(x, a, b)``        ``view(x, output shape)`` where ``x``'s strides allow
                                       a view, else ``view(clone(x), output shape)``; ``x``
                                       itself when ``a`` and ``b`` are one dim
``conv1d`` / ``conv2d``                ``convolution(..., transposed=False, ...)``
``conv_transpose1d`` / ``2d``          ``convolution(..., transposed=True, ...)``
``reshape_as(x, y)``                   ``view(x, y's shape)`` (``x`` contiguous)
``expand_as(x, y)``                    ``expand(x, y's shape)``
``pad(x, pad)`` (constant)             ``constant_pad_nd(x, pad, value or 0.0)``
``adaptive_avg_pool2d(x, [1, 1])``     ``mean.dim(x, [-1, -2], True)`` (``x`` contiguous)
``adaptive_avg_pool2d(x, size)``       ``_adaptive_avg_pool2d(x, size)``
``max_pool2d(x, ...)``                 ``max_pool2d_with_indices(x, ...)[0]`` (two nodes)
``relu_(x)``, ``add_(x, y)``, ...      ``relu(x)``, ``add(x, y)``, ... (functionalized)
=====================================  =========================================

An in-place op (``nn.ReLU(inplace=True)``, ``x += y``: most convnets are full of them) is
functionalized as the decomposition does it, when the value it mutates is a fresh one (made
by an op that returns no view, with no view taken of it): the op becomes its functional
form, and every later read of the mutated value reads that form's result.

Any other form (a ``softmax`` with a dtype, a training ``dropout``, a ``contiguous`` to
another memory format, a ``flatten`` of one dim that is an output, a convolution with string
padding, an in-place op on an input or a view) is left for the decomposition.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Node
from torch.fx.traceback import NodeSource

from ..graph.schema import bind
from ..passes.aten._recurrent import fake_value

aten = torch.ops.aten


def decompose_in_place(ep: torch.export.ExportedProgram, preserve_ops=()) -> bool:
    """Rewrite the nodes of ``ep`` that have a one-node decomposition, except calls of
    ``preserve_ops`` (kept whole, as the decomposition keeps them); True if any changed."""
    changed = False
    keep = set(preserve_ops)
    order = {node: i for i, node in enumerate(ep.graph.nodes)}
    for node in ep.graph.nodes:
        if node.op == "call_function" and _is_in_place(node.target):
            changed |= _functionalize(node, order)
    for node in list(ep.graph.nodes):
        rewrite = _REWRITES.get(node.target) \
            if node.op == "call_function" and node.target not in keep else None
        replacement = rewrite(node) if rewrite is not None else None
        if replacement is _DROPPED:
            node.replace_all_uses_with(node.args[0])
            ep.graph.erase_node(node)
            changed = True
        elif replacement is not None:
            node.target, node.args, node.kwargs = replacement
            changed = True
    if changed:
        ep.graph_module.recompile()
    return changed


_DROPPED = object()
"""A rewrite's answer for a node the decomposition drops: its readers read its input."""


def _is_in_place(op) -> bool:
    """``op`` writes to its first argument and to nothing else (``relu_``, ``add_.Tensor``)."""
    if not isinstance(op, torch._ops.OpOverload):
        return False
    written = [a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments]
    return bool(written) and written[0] and not any(written[1:])


def _functional(op):
    """The functional overload of in-place ``op`` (``aten.relu_.default`` ->
    ``aten.relu.default``), or None."""
    name = op._schema.name.split("::")[-1]
    packet = getattr(aten, name[:-1], None) if name.endswith("_") else None
    functional = getattr(packet, op._overloadname, None) if packet is not None else None
    if functional is None or _is_in_place(functional):
        return None
    return functional


def _returns_view(node: Node) -> bool:
    """``node``'s value may share storage with another value (a view op, an item of a
    multi-output op, or anything that is not an op call)."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return True
    return any(r.alias_info is not None for r in node.target._schema.returns)


def _functionalize(node: Node, order: dict) -> bool:
    """Make in-place op ``node`` its functional form, reading the mutated value's later
    readers from the result, if the mutated value is fresh (see the module's docstring);
    ``order``: each node's place in the graph."""
    functional = _functional(node.target)
    mutated = node.args[0] if node.args else None
    if functional is None or not isinstance(mutated, Node) or _returns_view(mutated):
        return False
    if any(_returns_view(user) for user in mutated.users if user is not node):
        return False
    later = [user for user in mutated.users if order[user] > order[node]]
    node.target = functional
    for user in later:
        user.replace_input_with(mutated, node)
    return True


def _shape(node: Node) -> list[int] | None:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and all(isinstance(d, int) for d in val.shape):
        return list(val.shape)
    return None


def _zeros(node: Node):
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    kw = node.kwargs
    return aten.full.default, (node.args[0], 0), {
        "dtype": kw.get("dtype") or val.dtype, "layout": kw.get("layout") or torch.strided,
        "device": kw.get("device") or val.device, "pin_memory": kw.get("pin_memory") or False}


def _transpose(node: Node):
    x, a, b = node.args
    rank = len(x.meta["val"].shape) if isinstance(x, Node) and "val" in x.meta else 0
    if rank == 0:
        return None
    dims = list(range(rank))
    a, b = a % rank, b % rank
    dims[a], dims[b] = dims[b], dims[a]
    return aten.permute.default, (x, dims), {}


def _squeeze_dim(node: Node):
    x, d = node.args
    return aten.squeeze.dims, (x, [d]), {}


def _unflatten(node: Node):
    shape = _shape(node)
    return None if shape is None else (aten.view.default, (node.args[0], shape), {})


def _softmax(node: Node):
    if len(node.args) > 2 and node.args[2] is not None or node.kwargs.get("dtype") is not None:
        return None
    return aten._softmax.default, (node.args[0], node.args[1], False), {}


def _contiguous(node: Node):
    # not ``bind``: the schema's default memory format is the enum's number, 0
    fmt = node.kwargs.get("memory_format", torch.contiguous_format)
    if fmt != torch.contiguous_format:
        return None
    return aten.clone.default, (node.args[0],), {"memory_format": torch.contiguous_format}


def _dropout(node: Node):
    return None if bind(node).train is not False else (aten.clone.default, (node.args[0],), {})


def _view_of_contiguous(node: Node):
    """``flatten`` or ``reshape_as`` of a contiguous tensor: a ``view`` to the output shape."""
    x = node.args[0].meta.get("val") if isinstance(node.args[0], Node) else None
    shape = _shape(node)
    if shape is None or not isinstance(x, torch.Tensor) or not x.is_contiguous():
        return None
    return aten.view.default, (node.args[0], shape), {}


def _flatten(node: Node):
    """``flatten`` as the decomposition makes it: dropped when it flattens one dim (its
    readers read its input; left to the decomposition when it is an output), a ``view``
    where the input's strides allow one, else a ``view`` of its contiguous ``clone`` (the
    clone made before ``node``, which becomes the view; one source, as ``_max_pool2d``'s
    pair)."""
    x = node.args[0]
    val = x.meta.get("val") if isinstance(x, Node) else None
    shape = _shape(node)
    if shape is None or not isinstance(val, torch.Tensor) or val.dim() == 0:
        return None
    a = bind(node)
    start, end = a.start_dim, a.end_dim
    if start % val.dim() == end % val.dim():
        return None if any(u.op == "output" for u in node.users) else _DROPPED
    try:
        fake_value(aten.view.default, (x, shape))
        return aten.view.default, (x, shape), {}
    except (RuntimeError, ValueError):  # no view of these strides has that shape
        pass
    kwargs = {"memory_format": torch.contiguous_format}
    copied = fake_value(aten.clone.default, (x,), kwargs)
    if copied is None:
        return None
    graph = node.graph
    with graph.inserting_before(node):
        clone = graph.call_function(aten.clone.default, (x,), kwargs)
    clone.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    clone.meta["val"] = copied
    clone.meta["from_node"] = [NodeSource(node, pass_name="decompose_in_place")]
    return aten.view.default, (clone, shape), {}


def _conv(transposed: bool):
    def rewrite(node: Node):
        a = bind(node)
        w = a.weight.meta.get("val") if isinstance(a.weight, Node) else None
        if not isinstance(w, torch.Tensor):
            return None
        n = w.dim() - 2
        def expand(v):  # noqa: E306 - an int default stands for every spatial dim
            return [v] * n if isinstance(v, int) else list(v)
        out_pad = expand(a.output_padding) if transposed else [0] * n
        return aten.convolution.default, (
            a.input, a.weight, a.bias, expand(a.stride), expand(a.padding),
            expand(a.dilation), transposed, out_pad, a.groups), {}
    return rewrite


def _expand_as(node: Node):
    shape = _shape(node.args[1]) if isinstance(node.args[1], Node) else None
    return None if shape is None else (aten.expand.default, (node.args[0], shape), {})


def _pad(node: Node):
    a = bind(node)
    if a.mode != "constant":
        return None
    value = 0.0 if a.value is None else a.value
    return aten.constant_pad_nd.default, (a.self, a.pad, value), {}


def _adaptive_avg_pool2d(node: Node):
    a = bind(node)
    x, size = a.self, a.output_size
    size = [size, size] if isinstance(size, int) else list(size or ())
    val = x.meta.get("val") if isinstance(x, Node) else None
    if not isinstance(val, torch.Tensor) or len(size) != 2 or \
            not all(isinstance(s, int) for s in size):
        return None
    if size != [1, 1]:
        return aten._adaptive_avg_pool2d.default, (x, size), {}
    if not val.is_contiguous():  # the decomposition restores a channels-last layout
        return None
    return aten.mean.dim, (x, [-1, -2], True), {}


def _max_pool2d(node: Node):
    """``max_pool2d`` -> ``getitem(max_pool2d_with_indices(...), 0)``: the call is made
    before ``node``, which becomes the item; both descend from one source, as after a
    decomposition (one debug handle)."""
    pooled = fake_value(aten.max_pool2d_with_indices.default, node.args, node.kwargs)
    if pooled is None:
        return None
    graph = node.graph
    with graph.inserting_before(node):
        call = graph.call_function(aten.max_pool2d_with_indices.default, node.args, node.kwargs)
    call.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    call.meta["val"] = pooled
    node._rename("getitem")
    call.meta["from_node"] = [NodeSource(node, pass_name="decompose_in_place")]
    return operator.getitem, (call, 0), {}


_REWRITES = {
    aten.zeros.default: _zeros,
    aten.transpose.int: _transpose,
    aten.squeeze.dim: _squeeze_dim,
    aten.unflatten.int: _unflatten,
    aten.softmax.int: _softmax,
    aten.contiguous.default: _contiguous,
    aten.dropout.default: _dropout,
    aten.flatten.using_ints: _flatten,
    aten.conv1d.default: _conv(False),
    aten.conv2d.default: _conv(False),
    aten.conv_transpose1d.default: _conv(True),
    aten.conv_transpose2d.input: _conv(True),
    aten.reshape_as.default: _view_of_contiguous,
    aten.expand_as.default: _expand_as,
    aten.pad.default: _pad,
    aten.adaptive_avg_pool2d.default: _adaptive_avg_pool2d,
    aten.max_pool2d.default: _max_pool2d,
}
