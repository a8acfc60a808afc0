"""MSE: the range with the lowest measured quantization error (``measure``) over a grid:
the min / max range scaled by ``GRID`` factors from 1/``GRID`` to 1, then each end alone
refined between the neighbouring factors, the other end held; measured on the coarse
histogram (``measure.coarse``), where it tries many ranges."""

from __future__ import annotations

import numpy as np

from .binned import Binned
from .measure import Measure

GRID = 32
REFINE = 8
"""Points each end is refined over, within one coarse factor step either side."""


def choose(binned: Binned, measure: Measure) -> tuple[float, float]:
    """The best range of the grid (the min / max range when nothing beats it)."""
    lo, hi = binned.min, binned.max
    measure = measure.coarse
    factors = np.arange(1, GRID + 1, dtype=np.float64) / GRID
    best = float(factors[int(np.argmin(measure(lo * factors, hi * factors)))])
    fine = best + np.arange(-REFINE, REFINE + 1, dtype=np.float64) / (REFINE * GRID)
    fine = fine[(fine > 0) & (fine <= 1)]
    his = hi * fine
    hi_best = float(his[int(np.argmin(measure(np.full_like(his, lo * best), his)))])
    los = lo * fine
    lo_best = float(los[int(np.argmin(measure(los, np.full_like(los, hi_best))))])
    return lo_best, hi_best
