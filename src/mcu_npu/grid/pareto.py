"""The Pareto front of a grid: the rows no other row beats on every objective at once (by
default lower latency, higher SQNR against the float model, less RAM), among the rows that
compiled and fit their target's memory. A row is dominated when another is at least as good
on every objective and better on one; rows with equal figures do not dominate each other."""

from __future__ import annotations

from typing import Sequence

from .cells import Row

OBJECTIVES: tuple[tuple[str, str], ...] = (("latency_us", "min"), ("sqnr_db", "max"),
                                           ("ram_bytes", "min"))
"""(row field, "min" or "max"): what the front trades off."""


def pareto_front(rows: Sequence[Row], objectives=OBJECTIVES) -> list[Row]:
    """The non-dominated rows of ``rows``, in their order. A row that failed, does not fit
    (``fits`` False) or lacks a figure an objective reads is not a candidate."""
    for key, sense in objectives:
        if sense not in ("min", "max"):
            raise ValueError(f"objective {key!r}: sense must be 'min' or 'max', not {sense!r}")
    candidates = [r for r in rows if r.ok and r.fits is not False and
                  all(isinstance(getattr(r, k), (int, float)) for k, _ in objectives)]
    scores = [tuple(getattr(r, k) if s == "min" else -getattr(r, k) for k, s in objectives)
              for r in candidates]
    return [r for r, a in zip(candidates, scores)
            if not any(_dominates(b, a) for b in scores)]


def _dominates(a: tuple, b: tuple) -> bool:
    """``a`` is at least as good as ``b`` everywhere and better somewhere (lower is better)."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))
