"""Histogram: the L2-optimal range search of PyTorch's ``HistogramObserver``
(``_non_linear_param_search``): start from the whole range and shrink it one end at a time,
by the next 1e-5 of the data's mass, at the end whose step drops the sparser tail (the
most bins for that mass), while the quantization error keeps falling (upstream goes on
through ties; here a tie stops, so an int16 symmetric range, which one end decides, is not
shrunk at the other end for nothing). Here the error is
the exact one of the candidate's scale and zero point (on the coarse histogram,
``measure.coarse``), not upstream's bin-spread approximation, and the bins are this
package's (``binned``)."""

from __future__ import annotations

import bisect

import numpy as np

from .binned import Binned
from .measure import Measure
from .percentile import segments

STEP = 1e-5
"""Mass by which each step moves a threshold (upstream's ``stepsize``)."""


def choose(binned: Binned, measure: Measure) -> tuple[float, float]:
    """The range where the greedy shrinking stops lowering the error."""
    left, right, counts = segments(binned)
    if len(counts) < 2:
        return binned.min, binned.max
    measure = measure.coarse
    cum = list(np.cumsum(counts))
    total = cum[-1]
    alpha, beta = 0.0, 1.0
    start, end = 0, len(counts) - 1
    best = float(measure(np.array([left[start]]), np.array([right[end]]))[0])
    while alpha < beta:
        next_alpha, next_beta = alpha + STEP, beta - STEP
        low = min(max(bisect.bisect_right(cum, next_alpha * total), start), end)
        high = max(min(bisect.bisect_left(cum, next_beta * total) - 1, end), start)
        new_start, new_end = start, end
        if low - start > end - high:
            new_start, alpha = low, next_alpha
        else:
            new_end, beta = high, next_beta
        if (new_start, new_end) == (start, end):
            continue
        error = float(measure(np.array([left[new_start]]), np.array([right[new_end]]))[0])
        if error >= best:
            break
        best, start, end = error, new_start, new_end
    return float(left[start]), float(right[end])
