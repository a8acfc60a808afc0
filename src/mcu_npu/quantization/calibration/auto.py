"""Auto: per tensor, the candidate range (of MinMax, histogram, percentile and MSE) with
the lowest measured quantization error, provided it beats MinMax's by ``MARGIN_DB``; else
MinMax. The margin keeps MinMax where the candidates only tie with it: a lower error on the
calibration data that small is not worth clipping values the deployed data may hold."""

from __future__ import annotations

import math

import numpy as np

from . import histogram, minmax, mse, percentile
from .binned import Binned
from .measure import Measure

MARGIN_DB = 1.0
"""How much lower (in dB of mean squared error) a candidate's error must be than MinMax's.
At 0.5 dB the GRU keyword spotter of the tests (int8, 49 unrolled steps) moved 250 tensors
off MinMax and its host run fell 1.17 dB behind its quantized reference on the calibration
samples (the contract allows 1 dB); at 1 dB it holds."""

CANDIDATES = {"minmax": minmax.choose, "histogram": histogram.choose,
              "percentile": percentile.choose, "mse": mse.choose}
"""The methods ``auto`` chooses among, in the order ties are broken."""


def choose_method(binned: Binned, measure: Measure) -> tuple[str, tuple[float, float]]:
    """(the method chosen, its range)."""
    ranges = {name: choose(binned, measure) for name, choose in CANDIDATES.items()}
    names = list(ranges)
    errors = measure(np.array([ranges[n][0] for n in names]),
                     np.array([ranges[n][1] for n in names]))
    best = int(np.argmin(errors))
    floor = errors[0] * 10.0 ** (-MARGIN_DB / 10.0)
    if errors[best] < floor and not math.isclose(errors[best], errors[0]):
        return names[best], ranges[names[best]]
    return "minmax", ranges["minmax"]
