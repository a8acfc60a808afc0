"""PT2E quantizers of the targets (pattern annotators), their composition, QAT helpers."""

from .neutron_quantizer import NeutronQuantizer, quantize, quantize_qat
from .qspecs import FIXED_QPARAMS, QuantSpecs

__all__ = ["NeutronQuantizer", "QuantSpecs", "FIXED_QPARAMS", "quantize", "quantize_qat"]
