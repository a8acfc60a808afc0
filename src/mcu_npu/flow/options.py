"""Options: every choice of one compile as one frozen value, checked once, its target resolved.

``compile_options(...)`` takes ``mcu_npu.compile``'s keyword arguments (the data: model,
example inputs, calibration and accuracy samples, stay apart) and raises ``ConfigError`` for
the first it cannot use; the API, the CLI and the precision search build the value once and
the stages read it. A variant of a compile is ``dataclasses.replace(options, ...)`` (the
precision search's trials change only the precision and the memory placement)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ..errors import ConfigError
from ..quantization.calibration import DEFAULT
from ..quantization.precision import AutoPrecision, PrecisionRequest, parse_precision
from ..report import check_io
from ..estimate.stream import check_frame_period
from ..targets import Target, get_target
from .inputs import (check_bias_correction, check_calibration_method, check_memory,
                     check_npu_compiler)


@dataclass(frozen=True)
class CompileOptions:
    """How to compile, as ``mcu_npu.compile``'s keyword arguments say (see its docstring);
    built by ``compile_options``, which checks every field."""

    target: Target
    npu_compiler: str = "auto"
    operators_not_to_delegate: tuple[str, ...] = ()
    train_fn: Callable | None = None
    """Quantization-aware training's loop (None: post-training quantization)."""
    io: str = "float"
    inputs: object = None
    """The declared inputs (``io_spec.InputSpec``s as ``compile`` takes them), or None."""
    outputs: str | None = None
    deployable: bool = False
    strict: bool = False
    precision: PrecisionRequest | AutoPrecision = PrecisionRequest()
    memory: str = "auto"
    calibration_method: str = DEFAULT
    bias_correction: bool = False
    frame_period_ms: float | None = None

    @property
    def qat(self) -> bool:
        return self.train_fn is not None


def compile_options(*, target: str | Target = "imxrt700", npu_compiler: str = "auto",
                    operators_not_to_delegate: Iterable[str] = (),
                    train_fn: Callable | None = None, io: str = "float", inputs=None,
                    outputs: str | None = None, deployable: bool = False,
                    strict: bool = False, precision=None, memory: str = "auto",
                    calibration_method: str = DEFAULT, bias_correction: bool = False,
                    frame_period_ms: float | None = None) -> CompileOptions:
    """``CompileOptions`` from ``compile``'s keyword arguments, each checked (ConfigError
    naming the first one the flow cannot use and what it takes)."""
    request = parse_precision(precision)
    frame_period_ms = check_frame_period(frame_period_ms)
    qat = train_fn is not None
    check_calibration_method(calibration_method, qat)
    check_bias_correction(bias_correction, qat)
    if isinstance(request, AutoPrecision) and (inputs is not None or outputs is not None):
        raise ConfigError("inputs=/outputs= are not available with precision='auto' yet: "
                          "compile with the precision the search chose (report.precision)")
    resolved = get_target(target)
    check_io(io)
    check_memory(memory, resolved)
    check_npu_compiler(npu_compiler, resolved)
    return CompileOptions(
        target=resolved, npu_compiler=npu_compiler,
        operators_not_to_delegate=tuple(operators_not_to_delegate), train_fn=train_fn, io=io,
        inputs=inputs, outputs=outputs, deployable=deployable, strict=strict,
        precision=request, memory=memory, calibration_method=calibration_method,
        bias_correction=bias_correction, frame_period_ms=frame_period_ms)
