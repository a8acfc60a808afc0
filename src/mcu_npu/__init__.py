"""mcu-npu: compile PyTorch models for NPU microcontrollers as an ExecuTorch backend."""

from .errors import (
    ConfigError,
    ConversionError,
    InputError,
    InvalidProgramError,
    McuNpuError,
    McuNpuWarning,
    MemoryFitError,
    NpuCompilerError,
    UnsupportedModelError,
)
from .io_spec import InputSpec
from .targets import get_target, targets
from .upstream.noise import silence_noise

silence_noise()  # before torch, torchao or ExecuTorch is imported (``upstream.noise``)


def __getattr__(name):
    """Heavy entry points load on first use so `import mcu_npu` stays quick."""
    if name in ("compile", "load", "CompiledProgram", "Report", "check_bundled"):
        from . import api, report

        return getattr(api, name, None) or getattr(report, name)
    if name in ("compare", "sweep"):
        from . import grid

        return getattr(grid, name)
    if name in ("streaming", "Stream"):
        from . import stream

        return getattr(stream, name)
    if name == "AutoPrecision":
        from .quantization.precision import AutoPrecision

        return AutoPrecision
    raise AttributeError(f"module 'mcu_npu' has no attribute {name!r}")


from .version import __version__  # noqa: E402,F401

__all__ = [
    "compile", "load", "CompiledProgram", "Report", "AutoPrecision", "check_bundled",
    "compare", "sweep", "streaming", "Stream",
    "targets", "get_target", "InputSpec",
    "McuNpuError", "ConfigError", "ConversionError", "InputError", "InvalidProgramError",
    "MemoryFitError", "NpuCompilerError", "UnsupportedModelError", "McuNpuWarning",
]
