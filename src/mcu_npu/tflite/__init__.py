"""Edge-dialect partitions -> TFLite int8 flatbuffers (NHWC, quantization parameters)."""

from .converter import TFLiteModel, convert, input_array, output_array
from .context import IOSpec
from .describe import describe

__all__ = ["convert", "TFLiteModel", "IOSpec", "describe", "input_array", "output_array"]
