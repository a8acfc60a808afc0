"""What the calibration methods read of a tensor: its exact minimum, maximum and count of
zeros, and a fine histogram of its other values, accumulated in float64 over the calibration
samples; and the quantization error of a range on that histogram.

The bins are ``[k * w, (k + 1) * w)`` for integers ``k``, ``w`` a power of two, at most
``BINS`` of them: when a sample widens the range past that, ``w`` doubles and every two bins
merge into one (``floor(k / 2)`` is the bin of the doubled width, exactly), so the histogram
is the one of all values at the final width. Values and divisions by ``w`` are exact in
float64, and nothing depends on the host's float32 kernels.

The error of a range is the mean squared difference between a value and its quantized
value (clipping and rounding), with the values of a bin spread evenly over it (the first
and last bins cut to the exact minimum and maximum) and exact zeros at zero, which every
range here represents exactly.
"""

from __future__ import annotations

import math

import numpy as np
import torch

BINS = 2048
"""Histogram bins at most: 8 or more per int8 step at the min / max range."""

PENDING = 1 << 20
"""Values ``Binned.add`` holds before binning them together."""


def _flushed(name: str) -> property:
    """A read-only view of attribute ``name`` of a ``Binned``, read once the values its
    ``add`` holds back are binned."""

    def read(self):
        self._flush()
        return getattr(self, name)

    return property(read)


class Binned:
    """Min, max, zeros and a power-of-two-width histogram of the values seen (float64)."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self._min = math.inf
        self._max = -math.inf
        self._zeros = 0
        self._width = 0.0  # w; 0 until a nonzero value is seen
        self._first = 0  # k of counts[0]
        self._counts = np.zeros(0, dtype=np.float64)
        self._nonzero = (math.inf, -math.inf)  # min and max of the nonzero values
        self._bins = None
        self._pending: list[np.ndarray] = []
        self._pending_size = 0

    @property
    def total(self) -> float:
        return float(self.counts.sum()) + self.zeros

    def add(self, x: torch.Tensor) -> None:
        """Take the values of ``x``; after the first nonzero ones, they wait (up to
        ``PENDING`` values) and are binned together, which bins them at the same width as
        one by one (the width only ever doubles to the smallest that holds the range)."""
        x = x.detach().reshape(-1).to(torch.float64).numpy()
        if x.size == 0:
            return
        self._bins = None
        if self._width == 0.0:
            self._add(x)
            return
        self._pending.append(x)
        self._pending_size += x.size
        if self._pending_size >= PENDING:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            pending, self._pending, self._pending_size = self._pending, [], 0
            self._add(np.concatenate(pending))

    min = _flushed("_min")
    max = _flushed("_max")
    zeros = _flushed("_zeros")
    width = _flushed("_width")
    first = _flushed("_first")
    counts = _flushed("_counts")

    def _add(self, x: np.ndarray) -> None:
        lo, hi = float(x.min()), float(x.max())
        if not (math.isfinite(lo) and math.isfinite(hi)):
            x = x[np.isfinite(x)]
            if x.size == 0:
                return
            lo, hi = float(x.min()), float(x.max())
        self._min, self._max = min(self._min, lo), max(self._max, hi)
        nonzero = x[x != 0]
        self._zeros += x.size - nonzero.size
        if nonzero.size == 0:
            return
        lo = min(self._nonzero[0], float(nonzero.min()))
        hi = max(self._nonzero[1], float(nonzero.max()))
        self._nonzero = (lo, hi)
        width = self._width or _start_width(lo, hi)
        while math.floor(hi / width) - math.floor(lo / width) + 1 > BINS:
            width *= 2.0
        first = math.floor(lo / width)
        counts = np.zeros(BINS, dtype=np.float64)
        used = np.nonzero(self._counts)[0]
        if used.size:
            factor = int(round(width / self._width))
            np.add.at(counts, (used + self._first) // factor - first, self._counts[used])
        k = np.floor(nonzero * (1.0 / width)).astype(np.int64) - first
        counts += np.bincount(k, minlength=BINS)
        self._width, self._first, self._counts = width, first, counts

    def merged(self, bins: int) -> "Binned":
        """A copy with at most ``bins`` bins: neighbours merged by a power of two."""
        self._flush()
        used = np.nonzero(self._counts)[0]
        out = Binned()
        out._min, out._max, out._zeros, out._nonzero = self._min, self._max, self._zeros, \
            self._nonzero
        if not used.size:
            return out
        factor = 1
        while (used[-1] + self._first) // factor - (used[0] + self._first) // factor + 1 > bins:
            factor *= 2
        out._width = self._width * factor
        out._first = (used[0] + self._first) // factor
        out._counts = np.bincount((used + self._first) // factor - out._first,
                                 weights=self._counts[used])
        return out

    def bins(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(left edges, right edges, counts) of the nonempty bins, the outer ones cut to the
        exact minimum and maximum."""
        if self._bins is None:
            self._bins = self._nonempty_bins()
        return self._bins

    def _nonempty_bins(self):
        self._flush()
        counts = self._counts
        used = np.nonzero(counts)[0]
        left = (self._first + used) * self._width
        right = left + self._width
        left = np.maximum(left, self._min)
        right = np.minimum(right, self._max)
        return left, right, counts[used]


def _start_width(lo: float, hi: float) -> float:
    """A power of two at which ``[lo, hi]`` (nonzero values) spans about ``BINS`` bins, or
    a 2**-20 relative one for a single value."""
    span = (hi - lo) / BINS if hi > lo else max(abs(lo), abs(hi)) * 2.0 ** -20
    return 2.0 ** math.floor(math.log2(span)) if span > 0 else 2.0 ** -1000


def _sawtooth_integral(t: np.ndarray) -> np.ndarray:
    """``P(t) = integral from 0 to t of (u - round(u))**2 du`` (any real ``t``): each whole
    period adds 1/12, and what is left, ``d = t - round(t)`` in [-1/2, 1/2], adds ``d**3 / 3``."""
    r = np.rint(t)
    d = t - r
    return r / 12.0 + d * d * d / 3.0


def range_errors(binned: Binned, scales: np.ndarray, zero_points: np.ndarray,
                 quant_min: int, quant_max: int) -> np.ndarray:
    """Mean squared quantization error of each (scale, zero point) on ``binned``'s values:
    one figure per candidate, clipping and rounding together (module docstring)."""
    total = binned.total
    scales = np.asarray(scales, dtype=np.float64).reshape(-1, 1)
    zps = np.asarray(zero_points, dtype=np.float64).reshape(-1, 1)
    if total == 0 or len(binned.counts) == 0:
        return np.zeros(scales.shape[0])
    left, right, counts = binned.bins()
    lo = (quant_min - zps) * scales  # the representable range of each candidate
    hi = (quant_max - zps) * scales
    point = right <= left  # a bin cut to one value (the minimum equals the maximum)
    sums = np.zeros(scales.shape[0])
    if point.any():
        x = left[point][None, :]
        q = np.clip(np.rint(np.clip(x, lo, hi) / scales) * scales, lo, hi)
        sums += ((x - q) ** 2) @ counts[point]
        left, right, counts = left[~point], right[~point], counts[~point]
    if len(counts):
        l, r = left[None, :], right[None, :]
        inside = scales ** 3 * (_sawtooth_integral(np.clip(r, lo, hi) / scales)
                                - _sawtooth_integral(np.clip(l, lo, hi) / scales))
        over = np.maximum(r - hi, 0.0) ** 3 - np.maximum(l - hi, 0.0) ** 3
        under = np.maximum(lo - l, 0.0) ** 3 - np.maximum(lo - r, 0.0) ** 3
        sums += (inside + (over + under) / 3.0) @ (counts / (right - left))
    return sums / total
