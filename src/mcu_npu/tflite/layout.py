"""Permutation helpers for the NCHW (PyTorch) <-> NHWC (TFLite) layout bookkeeping.

Every converted value carries ``perm``: the TFLite tensor equals ``torch_value.permute(perm)``.
Converters ask for the permutation they need; a transpose is emitted only when the data in
memory really has to move.
"""

from __future__ import annotations

Perm = tuple[int, ...]


def identity(rank: int) -> Perm:
    return tuple(range(rank))


def channels_last(rank: int) -> Perm:
    """(0, 2, 3, ..., 1): channels moved to the last axis; identity below rank 3."""
    if rank < 3:
        return identity(rank)
    return (0, *range(2, rank), 1)


def inverse(perm: Perm) -> Perm:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def permute_shape(shape, perm: Perm) -> tuple[int, ...]:
    return tuple(int(shape[p]) for p in perm)


def relative(src: Perm, dst: Perm) -> Perm:
    """The TRANSPOSE permutation taking a tensor laid out as ``src`` to layout ``dst``."""
    return tuple(src.index(d) for d in dst)


def same_memory_order(shape, src: Perm, dst: Perm) -> bool:
    """True when layouts ``src`` and ``dst`` differ only in where size-1 axes sit.

    Then a RESHAPE (which never moves data) turns one into the other.
    """
    return [d for d in src if shape[d] != 1] == [d for d in dst if shape[d] != 1]


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
