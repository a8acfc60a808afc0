"""Calibration methods: how an activation's quantization range is chosen from what the
calibration data showed, one module per method (``minmax``, ``histogram``, ``percentile``,
``mse``, and ``auto``, which picks per tensor the candidate with the lowest measured error).
``CalibrationObserver`` applies one to a tensor; the method each tensor got, with its
measured error beside MinMax's, is what the report reads (``calibration_records``)."""

from __future__ import annotations

from ...errors import ConfigError

METHODS = ("auto", "minmax", "histogram", "percentile", "mse")
"""The values of ``compile(..., calibration_method=...)``."""

DEFAULT = "minmax"
"""The default. ``auto`` lowers each tensor's own error, but its clipped ranges can part the
host run from the quantized reference by more than the numerics contract allows (timm's
efficientnet_b0_gn on the Ethos-U85: host 7.47 dB against the reference's 9.43), so it is
asked for, not assumed."""


def check_method(method) -> str:
    """``method`` if it names a calibration method, else ConfigError listing the valid ones."""
    if not isinstance(method, str) or method not in METHODS:
        raise ConfigError(f"unknown calibration_method {method!r}; choose one of: "
                          f"{', '.join(METHODS)}")
    return method
