"""Checks shared by several converters; each docstring is the reason given on rejection."""

from __future__ import annotations

from torch.fx import Node

from ..args import bind


def static_shapes(node: Node, target=None) -> bool:
    """shapes must be static"""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return all(v is not None and all(isinstance(d, int) for d in v.shape) for v in vals)


def max_rank(limit: int):
    def check(node: Node, target=None) -> bool:
        val = node.meta["val"]
        vals = val if isinstance(val, (list, tuple)) else [val]
        return all(len(v.shape) <= limit for v in vals)

    check.__doc__ = f"tensors must have rank at most {limit}"
    return check


def alpha_is_one(node: Node, target=None) -> bool:
    """alpha must be 1"""
    return getattr(bind(node), "alpha", 1) in (1, 1.0, None)
