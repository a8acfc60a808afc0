"""The yardstick every method is judged by: a candidate range's quantization error on the
calibration data (``binned.range_errors``) once the range is turned into the scale and zero
point the observer would give (0 inside the range, a symmetric range for int16)."""

from __future__ import annotations

from functools import cached_property
from typing import Callable

import numpy as np

from .binned import Binned, range_errors

COARSE_BINS = 512
"""Bins of the histogram a grid search runs on (``Measure.coarse``): two per int8 step at the
min / max range, a quarter of the cost of the full one."""

QParams = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""(candidate minima, maxima) -> (scales, zero points), as the observer computes them."""


class Measure:
    """(candidate minima, candidate maxima) -> the mean squared error of each range on
    ``binned``; ``coarse`` is the same on the histogram merged to ``COARSE_BINS`` bins, for
    searches that try many ranges."""

    def __init__(self, binned: Binned, qparams: QParams, quant_min: int, quant_max: int):
        self.binned, self.qparams = binned, qparams
        self.quant_min, self.quant_max = quant_min, quant_max

    def __call__(self, lows, highs) -> np.ndarray:
        scales, zero_points = self.qparams(np.asarray(lows), np.asarray(highs))
        return range_errors(self.binned, scales, zero_points, self.quant_min, self.quant_max)

    @cached_property
    def coarse(self) -> "Measure":
        return Measure(self.binned.merged(COARSE_BINS), self.qparams, self.quant_min,
                       self.quant_max)
