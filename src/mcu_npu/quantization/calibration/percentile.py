"""Percentile: the range from the ``LOW``-th to the ``HIGH``-th percentile of the values
seen, so the rarest outliers (a ten-thousandth of the data at each end) clip and the rest
gets a finer step."""

from __future__ import annotations

import numpy as np

from .binned import Binned
from .measure import Measure

HIGH = 99.99
LOW = 100.0 - HIGH


def choose(binned: Binned, measure: Measure) -> tuple[float, float]:
    """(the ``LOW``-th, the ``HIGH``-th percentile)."""
    return quantile(binned, LOW / 100.0), quantile(binned, HIGH / 100.0)


def quantile(binned: Binned, q: float) -> float:
    """The value below which a fraction ``q`` of the data lies: exact zeros at 0, the
    values of a bin spread evenly over it (linear inside the bin)."""
    left, right, counts = segments(binned)
    cum = np.cumsum(counts)
    target = q * cum[-1]
    i = int(np.searchsorted(cum, target, side="left"))
    i = min(i, len(counts) - 1)
    before = cum[i] - counts[i]
    inside = (target - before) / counts[i] if counts[i] > 0 else 0.0
    value = left[i] + min(max(inside, 0.0), 1.0) * (right[i] - left[i])
    return float(min(max(value, binned.min), binned.max))


def segments(binned: Binned) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(left, right, count) of the nonempty bins in order, the exact zeros as a segment of
    width 0 at 0 among them."""
    left, right, counts = binned.bins()
    if binned.zeros:
        at = int(np.searchsorted(left, 0.0, side="left"))
        left = np.insert(left, at, 0.0)
        right = np.insert(right, at, 0.0)
        counts = np.insert(counts, at, float(binned.zeros))
    return left, right, counts
