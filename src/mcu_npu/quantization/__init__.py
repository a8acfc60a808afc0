"""PT2E quantizers of the targets (pattern annotators), their composition, the driver that
prepares, calibrates and converts with them, QAT helpers."""

from .driver import quantize, quantize_qat
from .npu_quantizer import NpuQuantizer
from .qspecs import FIXED_QPARAMS, QuantSpecs

NeutronQuantizer = NpuQuantizer
"""The former name of ``NpuQuantizer``, kept for existing code."""

__all__ = ["NpuQuantizer", "NeutronQuantizer", "QuantSpecs", "FIXED_QPARAMS", "quantize",
           "quantize_qat"]
