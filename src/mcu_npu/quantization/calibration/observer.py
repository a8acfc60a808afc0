"""The PT2E observer that applies a calibration method to an activation: it records what
``MinMaxObserver`` records, plus the histogram the methods read (``binned``), and turns the
method's range into a scale and zero point when the program is converted.

Beside its parameters it keeps ``record``: the method that gave the range (for ``auto``,
the candidate it picked), the range, and the mean squared quantization error of that range
and of MinMax's on the calibration data (the report shows both)."""

from __future__ import annotations

import numpy as np
import torch
from torchao.quantization.pt2e.observer import MinMaxObserver

from . import check_method
from .auto import CANDIDATES, choose_method
from .binned import Binned, range_errors
from .measure import Measure


class CalibrationObserver(MinMaxObserver):
    """Per-tensor observer whose range is ``method``'s (``calibration.METHODS``)."""

    def __init__(self, method: str = "auto", **kwargs):
        super().__init__(**kwargs)
        self.method = check_method(method)
        self.binned = Binned()
        self._chosen = None

    def forward(self, x_orig):
        if x_orig.numel():
            super().forward(x_orig)
            self.binned.add(x_orig)
            self._chosen = None
        return x_orig

    def reset_min_max_vals(self):
        super().reset_min_max_vals()
        self.binned.reset()
        self._chosen = None

    def pin_to_min_max(self) -> None:
        """Take the range set in ``min_val`` / ``max_val`` as it is (a pinned input's,
        ``quantization.pinned_inputs``; an auto range the whole-model check turned down,
        ``whole_model``), whatever the method would choose."""
        self.method = "minmax"
        self._chosen = None

    def calculate_qparams(self):
        if self.binned.total == 0:
            return super().calculate_qparams()
        return self.choice()[0]

    @property
    def record(self) -> dict | None:
        """What the calibration chose (None before any data)."""
        return None if self.binned.total == 0 else self.choice()[1]

    def choice(self):
        """((scale, zero point), record), computed once per calibration."""
        if self._chosen is None:
            measure = self.measure
            if self.method == "auto":
                name, (lo, hi) = choose_method(self.binned, measure)
            else:
                name, (lo, hi) = self.method, CANDIDATES[self.method](self.binned, measure)
            if name == "minmax":  # MinMaxObserver's own parameters, bit for bit
                qparams = super().calculate_qparams()
            else:
                qparams = self._qparams(np.array([lo]), np.array([hi]))
                qparams = (qparams[0][:1], qparams[1][:1])
            errors = self._errors(*qparams, *super().calculate_qparams())
            self._chosen = qparams, {"method": name, "range": [float(lo), float(hi)],
                                     "mse": errors[0], "minmax_mse": errors[1]}
        return self._chosen

    @property
    def measure(self) -> Measure:
        """Mean squared quantization error of candidate ranges (``calibration.measure``)."""
        return Measure(self.binned, self._qparams_np, self.quant_min, self.quant_max)

    def _qparams_np(self, lows, highs) -> tuple[np.ndarray, np.ndarray]:
        """``_calculate_qparams`` of torchao's observers for many ranges at once, in numpy
        float32 (the same IEEE operations, so the same values; the parameters a range
        finally gets are torchao's own), without a torch call per candidate."""
        f32 = np.float32
        lows = np.minimum(np.asarray(lows, dtype=f32), np.asarray(highs, dtype=f32))
        neg = np.minimum(lows, f32(0))
        pos = np.maximum(np.asarray(highs, dtype=f32), f32(0))
        qmin, qmax = self.quant_min, self.quant_max
        eps = f32(float(self.eps))
        if self.qscheme == torch.per_tensor_symmetric:
            scales = np.maximum(np.maximum(-neg, pos) / f32((qmax - qmin) / 2), eps)
            zero_points = np.zeros_like(scales, dtype=np.int64)
        else:
            scales = np.maximum((pos - neg) / f32(qmax - qmin), eps)
            zero_points = np.clip(qmin - np.round(neg / scales).astype(np.int64), qmin, qmax)
        return scales.astype(np.float64), zero_points

    def _qparams(self, lows, highs):
        """The observer's (scales, zero points) for float32 ranges, one per candidate."""
        lows = torch.as_tensor(np.minimum(lows, highs), dtype=torch.float32).reshape(-1)
        highs = torch.as_tensor(highs, dtype=torch.float32).reshape(-1)
        return self._calculate_qparams(lows, highs)

    def _errors(self, scale, zero_point, mm_scale, mm_zero_point) -> list[float]:
        errors = range_errors(self.binned,
                              np.array([float(scale[0]), float(mm_scale[0])]),
                              np.array([int(zero_point[0]), int(mm_zero_point[0])]),
                              self.quant_min, self.quant_max)
        return [float(e) for e in errors]

    def extra_repr(self):
        return f"method={self.method}, {super().extra_repr()}"
