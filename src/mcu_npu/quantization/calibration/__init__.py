"""Calibration methods: how an activation's quantization range is chosen from what the
calibration data showed, one module per method (``minmax``, ``histogram``, ``percentile``,
``mse``, and ``auto``, which picks per tensor the candidate with the lowest measured error).
``CalibrationObserver`` applies one to a tensor; the method each tensor got, with its
measured error beside MinMax's, is what the report reads (``calibration_records``)."""

from __future__ import annotations

from ...errors import ConfigError

METHODS = ("auto", "minmax", "histogram", "percentile", "mse")
"""The values of ``compile(..., calibration_method=...)``."""

DEFAULT = "auto"
"""The default: each tensor's range lowers its own measured error, and the whole model's
check (``whole_model``) falls back to MinMax everywhere where those ranges together do not
raise the output SQNR on the calibration samples."""


def check_method(method) -> str:
    """``method`` if it names a calibration method, else ConfigError listing the valid ones."""
    if not isinstance(method, str) or method not in METHODS:
        raise ConfigError(f"unknown calibration_method {method!r}; choose one of: "
                          f"{', '.join(METHODS)}")
    return method
