"""The project's exception hierarchy: one base, one class per kind of failure."""


class McuNpuError(Exception):
    """Base class of every error mcu-npu raises on purpose."""


class ConfigError(McuNpuError, ValueError):
    """A setting is invalid: unknown target, bad option value, mismatched calibration data."""


class UnsupportedModelError(McuNpuError):
    """The model, or a node of it, cannot be handled (export failed, op not convertible)."""


class ConversionError(UnsupportedModelError):
    """A node reached the TFLite converter that it cannot convert."""


class NpuCompilerError(McuNpuError):
    """An NPU compiler (Vela, the Neutron converter) failed; carries its inputs and message."""

    def __init__(self, message: str, *, tool: str = "", details: str = ""):
        super().__init__(message if not details else f"{message}\n{details}")
        self.tool = tool
        self.details = details


class InvalidProgramError(McuNpuError):
    """A .pte file or payload is missing, corrupt, or cannot run on the host."""


class InputError(McuNpuError, ValueError):
    """Data handed to a program does not match what it expects (shape, dtype, count)."""
