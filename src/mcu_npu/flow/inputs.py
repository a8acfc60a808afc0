"""Inputs: the arguments of ``compile`` checked, before anything is exported, and put in the
form the stages take."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import ConfigError, warn_user
from ..io_spec import ProgramIO
from ..npu.compilers import compiler_names
from ..partition.plan import PlanOptions
from ..quantization.calibration import check_method
from ..targets import MEMORY_CHOICES, Target
from .front import declared_io


@dataclass(frozen=True)
class Arguments:
    """What the stages compile with: the target, the example inputs as a tuple of tensors,
    the calibration samples (tuples matching them), the options the placement is decided
    with (the operators kept off the NPU, the NPU compiler), the program's I/O mode and the
    per-layer accuracy samples (None: not measured)."""

    target: Target
    example_inputs: tuple
    samples: list[tuple]
    plan_options: PlanOptions
    io: str
    accuracy_samples: list[tuple] | None
    memory: str = "auto"
    """Where the program lives: "auto" or one of the target's placements."""
    program_io: ProgramIO = ProgramIO()
    """The declared program I/O (``io_spec``); the samples above are as its front takes them."""


def check_arguments(example_inputs, calibration, accuracy_samples, options) -> Arguments:
    """The data of a compile (example inputs, calibration and accuracy samples) with its
    ``options`` (a ``flow.options.CompileOptions``, checked already) as the stages take them;
    ConfigError for data the flow cannot use. Without calibration data the example inputs
    calibrate, with a warning."""
    example_inputs = as_inputs(example_inputs)
    if calibration is None:
        warn_user("no calibration data: calibrating on the example inputs alone, so "
                  "quantization ranges will be narrow and results inaccurate; pass "
                  "calibration samples")
        samples = [example_inputs]
    else:
        samples = check_calibration(calibration, example_inputs)
    if accuracy_samples is not None:
        accuracy_samples = check_calibration(accuracy_samples, example_inputs)
    program_io, example_inputs, samples, accuracy_samples = declared_io(
        options.inputs, options.outputs, options.io, example_inputs, samples, accuracy_samples)
    return Arguments(options.target, example_inputs, samples,
                     PlanOptions(options.operators_not_to_delegate, options.npu_compiler,
                                 calibration_method=options.calibration_method,
                                 bias_correction=options.bias_correction), options.io,
                     accuracy_samples, options.memory, program_io)


QAT_METHODS = ("auto", "minmax")
"""What ``calibration_method`` may say with quantization-aware training: its fake quantizers
start from the calibration's min / max and follow a moving average of it while training."""


def check_bias_correction(bias_correction, qat: bool = False) -> bool:
    """``bias_correction`` as the flow takes it: a bool, and off with quantization-aware
    training (its training sets the biases)."""
    if not isinstance(bias_correction, bool):
        raise ConfigError(f"bias_correction takes True or False, not {bias_correction!r}")
    if bias_correction and qat:
        raise ConfigError("bias_correction does not apply to quantization-aware training: "
                          "its training sets the biases; leave bias_correction=False with "
                          "train_fn")
    return bias_correction


def check_calibration_method(method, qat: bool = False) -> str:
    """``method`` if it names a calibration method (with ``qat``: one of ``QAT_METHODS``),
    else ConfigError listing the valid ones."""
    check_method(method)
    if qat and method not in QAT_METHODS:
        raise ConfigError(f"calibration_method {method!r} does not apply to quantization-aware "
                          f"training (train_fn=): its fake quantizers learn ranges from a "
                          f"moving-average min / max; leave calibration_method at 'auto' (or "
                          f"'minmax'), or drop train_fn to calibrate with {method!r}")
    return method


def check_npu_compiler(name, target: Target) -> str:
    """``name`` if it is "auto", "reference" or the vendor compiler of ``target``'s NPU,
    else ConfigError saying which ones fit."""
    fitting = ("auto", "reference", target.npu.vendor_compiler)
    known = compiler_names()
    if name not in known:
        raise ConfigError(f"unknown npu_compiler {name!r}; choose one of: "
                          f"{', '.join(known)}")
    if name not in fitting:
        raise ConfigError(f"npu_compiler {name!r} does not compile for target {target.name} "
                          f"({target.npu.name}); choose one of: {', '.join(fitting)}")
    return name


def check_memory(memory, target: Target) -> str:
    """``memory`` if it is "auto" or a placement ``target`` has, else ConfigError listing
    the valid ones."""
    if not isinstance(memory, str) or memory not in MEMORY_CHOICES:
        raise ConfigError(f"unknown memory placement {memory!r}; choose one of: "
                          f"{', '.join(MEMORY_CHOICES)}")
    if memory != "auto" and memory not in target.placements:
        raise ConfigError(f"target {target.name} cannot place the program in {memory!r}; "
                          f"it can: {', '.join(('auto', *target.placements))}")
    return memory


def as_inputs(x) -> tuple:
    """Example inputs as a tuple of tensors."""
    if isinstance(x, torch.Tensor):
        return (x,)
    if isinstance(x, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in x):
        return tuple(x)
    raise ConfigError("example inputs must be a tensor or a tuple of tensors")


def check_calibration(samples, example_inputs: tuple) -> list[tuple]:
    """Calibration samples as tuples matching the example inputs; ConfigError otherwise."""
    checked = []
    for i, sample in enumerate(samples):
        sample = (sample,) if isinstance(sample, torch.Tensor) else tuple(sample)
        if len(sample) != len(example_inputs):
            raise ConfigError(f"calibration sample {i} has {len(sample)} arrays but the model "
                              f"takes {len(example_inputs)} inputs")
        for j, (s, e) in enumerate(zip(sample, example_inputs)):
            s = _as_tensor(s, f"calibration sample {i}, input {j}")
            if tuple(s.shape) != tuple(e.shape):
                raise ConfigError(f"calibration sample {i}, input {j} has shape "
                                  f"{tuple(s.shape)} but the model's example input has "
                                  f"{tuple(e.shape)}")
            if s.dtype != e.dtype:
                raise ConfigError(f"calibration sample {i}, input {j} has dtype {s.dtype} but "
                                  f"the model's example input has {e.dtype}")
        checked.append(tuple(_as_tensor(s, f"calibration sample {i}") for s in sample))
    if not checked:
        raise ConfigError("calibration data is empty")
    return checked


def _as_tensor(value, what: str) -> torch.Tensor:
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ConfigError(f"{what} is not a tensor or an array: {type(value).__name__}") from exc
