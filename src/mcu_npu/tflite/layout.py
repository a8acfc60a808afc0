"""Permutation helpers for the NCHW (PyTorch) <-> NHWC (TFLite) layout bookkeeping.

Every converted value carries ``perm``: the TFLite tensor equals ``torch_value.permute(perm)``.
Converters ask for the permutation they need; a transpose is emitted only when the data in
memory really has to move.
"""

from __future__ import annotations

import math

# one definition each, shared with the runtime
from ..device_io import inverse, same_memory_order  # noqa: F401

Perm = tuple[int, ...]


def identity(rank: int) -> Perm:
    return tuple(range(rank))


def channels_last(rank: int) -> Perm:
    """(0, 2, 3, ..., 1): channels moved to the last axis; identity below rank 3."""
    if rank < 3:
        return identity(rank)
    return (0, *range(2, rank), 1)


def permute_shape(shape, perm: Perm) -> tuple[int, ...]:
    return tuple(int(shape[p]) for p in perm)


def relative(src: Perm, dst: Perm) -> Perm:
    """The TRANSPOSE permutation taking a tensor laid out as ``src`` to layout ``dst``."""
    return tuple(src.index(d) for d in dst)


def reshape_layout(in_shape, in_perm: Perm, out_shape) -> Perm | None:
    """A layout for a reshape's output that keeps the input's memory order, if one exists.

    Succeeds when the reshape only inserts or removes size-1 axes (squeeze, unsqueeze,
    such views): the non-1 axes map one to one and keep their order in memory. Prefers the
    channels-last layout, then the identity, so layouts stay regular.
    """
    src = [i for i, d in enumerate(in_shape) if d != 1]
    dst = [i for i, d in enumerate(out_shape) if d != 1]
    if [in_shape[i] for i in src] != [out_shape[i] for i in dst]:
        return None
    to_out = dict(zip(src, dst))
    memory = [to_out[d] for d in in_perm if in_shape[d] != 1]
    rank = len(out_shape)
    candidates = [channels_last(rank), identity(rank)]
    if in_perm == identity(len(in_perm)):
        candidates.reverse()
    for cand in candidates:
        if [d for d in cand if out_shape[d] != 1] == memory:
            return cand
    ones = [i for i, d in enumerate(out_shape) if d == 1]
    return tuple(ones + memory)


def block_swap(shape, perm: Perm) -> tuple[int, int, int] | None:
    """``(outer, A, B)`` when transposing ``shape`` by ``perm`` only swaps two adjacent blocks
    of axes after leading ones kept in place, i.e. it is a (outer, A, B) -> (outer, B, A)
    transpose; None otherwise (or when nothing moves)."""
    rank = len(perm)
    lead = 0
    while lead < rank and perm[lead] == lead:
        lead += 1
    for cut in range(lead + 1, rank):
        if perm == (*range(lead), *range(cut, rank), *range(lead, cut)):
            size = lambda axes: math.prod(int(shape[d]) for d in axes)  # noqa: E731
            return (size(range(lead)), size(range(lead, cut)), size(range(cut, rank)))
    return None
