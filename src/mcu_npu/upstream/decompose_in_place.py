"""Core-ATen decompositions that rewrite one node into one node, done on the graph as it is.

``to_edge``'s decomposition re-traces the whole program on fake tensors as soon as one op in
it decomposes, and the Edge passes after it then re-trace it again (``upstream.edge_dialect``): an
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
``flatten.using_ints(x, a, b)``        ``view(x, output shape)`` (``x`` contiguous)
``conv1d`` / ``conv2d``                ``convolution(..., transposed=False, ...)``
``conv_transpose1d`` / ``2d``          ``convolution(..., transposed=True, ...)``
=====================================  =========================================

Any other form (a ``softmax`` with a dtype, a training ``dropout``, a ``contiguous`` to
another memory format, a ``flatten`` of a strided tensor, a convolution with string
padding) is left for the decomposition.
"""

from __future__ import annotations

import torch
from torch.fx import Node

from ..graph.schema import bind

aten = torch.ops.aten


def decompose_in_place(ep: torch.export.ExportedProgram, preserve_ops=()) -> bool:
    """Rewrite the nodes of ``ep`` that have a one-node decomposition, except calls of
    ``preserve_ops`` (kept whole, as the decomposition keeps them); True if any changed."""
    changed = False
    keep = set(preserve_ops)
    for node in ep.graph.nodes:
        rewrite = _REWRITES.get(node.target) \
            if node.op == "call_function" and node.target not in keep else None
        replacement = rewrite(node) if rewrite is not None else None
        if replacement is not None:
            node.target, node.args, node.kwargs = replacement
            changed = True
    if changed:
        ep.graph_module.recompile()
    return changed


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
    fmt = node.args[1] if len(node.args) > 1 else node.kwargs.get("memory_format",
                                                                    torch.contiguous_format)
    if fmt != torch.contiguous_format:
        return None
    return aten.clone.default, (node.args[0],), {"memory_format": torch.contiguous_format}


def _dropout(node: Node):
    train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train")
    return None if train is not False else (aten.clone.default, (node.args[0],), {})


def _flatten(node: Node):
    x = node.args[0].meta.get("val") if isinstance(node.args[0], Node) else None
    shape = _shape(node)
    if shape is None or not isinstance(x, torch.Tensor) or not x.is_contiguous():
        return None
    return aten.view.default, (node.args[0], shape), {}


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
}
