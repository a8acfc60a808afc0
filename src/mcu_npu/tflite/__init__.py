"""Edge-dialect partitions -> TFLite int8 flatbuffers (NHWC, quantization parameters)."""

from ..device.tflite_model import IOSpec, TFLiteModel, input_array, output_array
from . import ops  # noqa: F401  (registers every converter with the registry)
from .converter import convert
from .describe import describe

__all__ = ["convert", "TFLiteModel", "IOSpec", "describe", "input_array", "output_array"]
