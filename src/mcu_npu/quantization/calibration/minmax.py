"""MinMax: the range is the smallest and largest value seen, so nothing is clipped and the
rounding step is as coarse as the extremes demand (what ``MinMaxObserver`` gives)."""

from __future__ import annotations

from .binned import Binned
from .measure import Measure


def choose(binned: Binned, measure: Measure) -> tuple[float, float]:
    """(min, max) of the calibration data."""
    return binned.min, binned.max
