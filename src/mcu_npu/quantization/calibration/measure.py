"""The yardstick every method is judged by: a candidate range's quantization error on the
calibration data (``binned.range_errors``) once the range is turned into the scale and zero
point the observer would give (0 inside the range, a symmetric range for int16)."""

from __future__ import annotations

from typing import Callable

import numpy as np

Measure = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""(candidate minima, candidate maxima) -> the mean squared error of each range."""
