"""Multiply-accumulates of a graph node, from its shapes: the figure the partitioner records
per node and the report sums."""

from __future__ import annotations


def node_macs(node) -> int:
    """Multiply-accumulates of a conv / matmul node from its shapes (0 for other ops)."""
    name = getattr(node.target, "__name__", "")
    val = node.meta.get("val")
    if val is None or not hasattr(val, "shape"):
        return 0
    out = 1
    for d in val.shape:
        out *= int(d)
    if name.startswith("aten.convolution"):
        w = node.args[1].meta["val"].shape
        transposed = bool(node.args[6]) if len(node.args) > 6 else False
        kernel = 1
        for d in w[2:]:
            kernel *= int(d)
        if transposed:  # every input element meets every output channel's kernel
            x = node.args[0].meta["val"]
            n_in = 1
            for d in x.shape:
                n_in *= int(d)
            return n_in * int(w[1]) * kernel
        return out * int(w[1]) * kernel
    if name.startswith(("aten.linear", "aten.addmm", "aten.mm", "aten.bmm")):
        x = node.args[1 if name.startswith("aten.addmm") else 0].meta["val"]
        return out * int(x.shape[-1])
    return 0
