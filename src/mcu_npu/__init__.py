"""mcu-npu: compile PyTorch models for NPU microcontrollers as an ExecuTorch backend."""

from .errors import (
    ConfigError,
    ConversionError,
    InputError,
    InvalidProgramError,
    McuNpuError,
    NpuCompilerError,
    UnsupportedModelError,
)
from .targets import get_target, targets

__version__ = "0.1.0"

__all__ = [
    "targets", "get_target", "McuNpuError", "ConfigError", "ConversionError", "InputError",
    "InvalidProgramError", "NpuCompilerError", "UnsupportedModelError",
]
