"""Permutation helpers for the NCHW (PyTorch) <-> NHWC (TFLite) layout bookkeeping.

Every converted value carries ``perm``: the TFLite tensor equals ``torch_value.permute(perm)``.
Converters ask for the permutation they need; a transpose is emitted only when the data in
memory really has to move.
"""

from __future__ import annotations

import math

# one definition each, shared with the runtime
from ..device.delegate_io import inverse, same_memory_order  # noqa: F401

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


def _reshape_blocks(in_shape, out_shape) -> list[tuple[list[int], list[int]]] | None:
    """The reshape as blocks ``(input axes, output axes)`` of equal element count, each the
    smallest run of adjacent non-unit axes on both sides (one axis each for a squeeze or an
    unsqueeze, several where axes merge or split); None when the sizes do not add up."""
    src = [i for i, d in enumerate(in_shape) if d != 1]
    dst = [i for i, d in enumerate(out_shape) if d != 1]
    blocks, i, j = [], 0, 0
    while i < len(src) and j < len(dst):
        ins, outs = [src[i]], [dst[j]]
        a, b = int(in_shape[src[i]]), int(out_shape[dst[j]])
        while a != b:
            if a < b and i + 1 < len(src):
                i += 1
                ins.append(src[i])
                a *= int(in_shape[src[i]])
            elif b < a and j + 1 < len(dst):
                j += 1
                outs.append(dst[j])
                b *= int(out_shape[dst[j]])
            else:
                return None
        blocks.append((ins, outs))
        i, j = i + 1, j + 1
    return blocks if i == len(src) and j == len(dst) else None


def reshape_layout(in_shape, in_perm: Perm, out_shape) -> Perm | None:
    """A layout for a reshape's output that keeps the input's memory order, if one exists.

    Succeeds when every block of axes the reshape merges or splits (a single axis for a
    squeeze or an unsqueeze) lies in memory as one run, in its own axis order: a channels-
    last (N, C, H, W) viewed as (N, G, C / G, H * W) keeps its bytes as (N, H * W, G, C / G).
    Prefers the channels-last layout, then the identity, so layouts stay regular.
    """
    blocks = _reshape_blocks(in_shape, out_shape)
    if blocks is None:
        return None
    memory_in = [d for d in in_perm if in_shape[d] != 1]
    memory = []
    pos = 0
    for ins, outs in sorted(blocks, key=lambda blk: memory_in.index(blk[0][0])):
        if memory_in[pos:pos + len(ins)] != ins:
            return None
        memory += outs
        pos += len(ins)
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
