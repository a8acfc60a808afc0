"""Auto: per tensor, the candidate range (of MinMax, histogram, percentile and MSE) with
the lowest measured quantization error, provided it beats MinMax's by ``MARGIN_DB``; else
MinMax. The margin keeps MinMax where the candidates only tie with it. Whether the chosen
ranges stand together is decided on the whole model afterwards (``whole_model``)."""

from __future__ import annotations

import math

import numpy as np

from . import histogram, minmax, mse, percentile
from .binned import Binned
from .measure import Measure

MARGIN_DB = 0.1
"""How much lower (in dB of mean squared error) a candidate's error must be than MinMax's.
On the trained ViT of ``benchmarks/trained_accuracy.py`` (corstone-300, its fixed split)
0.1 dB gives 29.72 dB output SQNR on held-out digits against 27.16 with MinMax; larger margins keep
MinMax on the tensors that buy it."""

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
