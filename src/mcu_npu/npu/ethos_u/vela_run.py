"""One in-process Vela run: typed options -> the call -> Regor's compiled model.

Vela 5 compiles every Ethos-U network with its C++ core, Regor. This module makes the call the
``vela`` command makes, without the command line: Vela's ``ArchitectureFeatures`` reads the
system config and memory mode from vela.ini, Vela's ``get_compiler_config`` writes the
compiler options, and ``ethosu.regor.compile`` returns the command stream, the weights, where
the inputs and outputs sit, and its estimates. Vela's console output is captured and attached
to errors. Vela is imported only here, and only when called.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import io
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import NpuCompilerError
from ...targets import VelaConfig
from .payload import COMMAND_MAGICS

TOOL = "vela"
KEEP_TEMPS = "MCU_NPU_KEEP_TEMPS"
"""When set, each Vela run's model, configuration and console output stay in a directory."""
MISSING = "Vela is not installed: pip install ethos-u-vela"
PROGRESS_BYTES = 8 << 20
"""Networks at least this big announce their Vela run on a terminal (Regor compiles about
6 MiB a second on one host core, so smaller runs pass unnoticed)."""


@dataclass(frozen=True, kw_only=True)
class VelaOptions:
    """Compiler settings of one Vela run; the defaults are those of the ``vela`` command."""

    optimise: str = "Performance"
    """Vela's optimisation strategy: "Performance" or "Size"."""
    arena_cache_size: int | None = None
    """Bytes; None takes the target's VelaConfig, then the memory mode's value."""
    cop_format: str = "COP1"
    """Driver-actions format of the command stream: "COP1" or "COP2"."""
    cpu_tensor_alignment: int = 16
    tensor_allocator: str = "HillClimb"
    softmax_int16_neg_exp_range: float = 10.0


@dataclass(frozen=True)
class VelaCall:
    """The arguments of one ``ethosu.regor.compile`` call, plus the figures stats need."""

    architecture: str
    """Regor's name of the NPU family: "EthosU55", "EthosU65", "EthosU85"."""
    system_config: str
    """Text: the [architecture] and [vela] sections, then the whole vela.ini."""
    compiler_options: str
    clock_hz: float
    macs_per_cycle: int


def vela_installed() -> bool:
    try:
        return importlib.util.find_spec("ethosu.vela") is not None
    except (ImportError, ValueError):
        return False


def _import_vela():
    """(vela CLI module, architecture_features, errors, regor). The CLI module goes first:
    importing Vela's modules in another order trips a circular import."""
    try:
        from ethosu import regor
        from ethosu.vela import vela as cli
        from ethosu.vela import architecture_features, errors
    except ImportError as exc:
        raise NpuCompilerError(MISSING, tool=TOOL, details=str(exc)) from None
    return cli, architecture_features, errors, regor


def check_options(options: VelaOptions) -> None:
    """Each enum-like option must be one Vela knows (its scheduler's and allocator's enums;
    the command-stream formats the Ethos-U runtime accepts)."""
    _import_vela()
    from ethosu.vela.nn_graph import TensorAllocator
    from ethosu.vela.scheduler import OptimizationStrategy

    choices = {"optimise": [s.name for s in OptimizationStrategy],
               "tensor_allocator": [a.name for a in TensorAllocator],
               "cop_format": [m.decode() for m in COMMAND_MAGICS]}
    for name, valid in choices.items():
        if getattr(options, name) not in valid:
            raise NpuCompilerError(f"VelaOptions.{name}={getattr(options, name)!r}; valid: "
                                   f"{', '.join(valid)}", tool=TOOL)


def _vela_message(exc: Exception) -> str:
    return getattr(exc, "error_msg", None) or str(exc)


def config_file(config: VelaConfig, features) -> str:
    """The .ini path: relative names are looked up in Vela's own config_files directory."""
    path = Path(config.config_file)
    if not path.is_absolute() and not path.exists():
        path = Path(features.CONFIG_FILES_PATH) / path
    if not path.is_file():
        raise NpuCompilerError(f"Vela configuration file {config.config_file!r} not found",
                               tool=TOOL, details=f"looked for {path}")
    return str(path)


def architecture(config: VelaConfig, options: VelaOptions):
    """Vela's ArchitectureFeatures for ``config``; Vela's own errors become NpuCompilerError."""
    _, features, errors, _ = _import_vela()
    valid = features.Accelerator.member_list()
    if config.accelerator.lower() not in valid:
        raise NpuCompilerError(f"unknown Ethos-U accelerator configuration "
                               f"{config.accelerator!r}; Vela knows: {', '.join(valid)}",
                               tool=TOOL)
    arena = options.arena_cache_size if options.arena_cache_size is not None else \
        config.arena_cache_size
    arch_type = features.ArchitectureFeatures
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return arch_type(
                vela_config_files=[config_file(config, features)],
                accelerator_config=config.accelerator, system_config=config.system_config,
                memory_mode=config.memory_mode, max_blockdep=arch_type.MAX_BLOCKDEP,
                verbose_config=False, arena_cache_size=arena)
    except errors.VelaError as exc:
        raise NpuCompilerError(_vela_message(exc), tool=TOOL, details=str(config)) from None


def build_call(arch, options: VelaOptions, *, output_format: str = "raw",
               enable_db: bool = False) -> VelaCall:
    """The Regor call for ``arch``: the text the ``vela`` command builds, from typed fields."""
    cli, *_ = _import_vela()
    check_options(options)
    family = "".join(part.capitalize() for part in arch.accelerator_config.value.split("-")[:-1])
    system = (f"[architecture]\nmacs={arch.num_macs_per_cycle}\ncores={arch.ncores}\n"
              f"[vela]\nsystem_config_name={arch.system_config}\n"
              f"memory_mode_name={arch.memory_mode}\n")
    system += "".join(Path(f).read_text() for f in arch.vela_config_files)
    flags = dict.fromkeys(("verbose_all", "verbose_high_level_command_stream",
                           "verbose_register_command_stream", "verbose_schedule",
                           "verbose_allocation", "verbose_graph", "verbose_quantization",
                           "verbose_packing", "verbose_performance", "show_cpu_operations",
                           "disable_chaining", "disable_fwd", "disable_cascading",
                           "disable_buffering", "disable_ifm_reuse", "separate_io_regions"),
                          False)
    text = cli.get_compiler_config(
        **flags, enable_debug_db=enable_db, optimize=options.optimise,
        arena_cache_size=arch.arena_cache_size, output_format=output_format,
        cop_format=options.cop_format, cpu_tensor_alignment=options.cpu_tensor_alignment,
        tensor_allocator=options.tensor_allocator,
        softmax_int16_neg_exp_range=options.softmax_int16_neg_exp_range)
    return VelaCall(family, system, text, float(arch.core_clock),
                    arch.num_macs_per_cycle * arch.ncores)


class _Output:
    text = ""


@contextlib.contextmanager
def captured_output():
    """Everything printed while Vela runs; its C++ core writes to file descriptor 1."""
    out, py_out = _Output(), io.StringIO()
    sys.stdout.flush()
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(1)
        os.dup2(tmp.fileno(), 1)
        try:
            with contextlib.redirect_stdout(py_out):
                yield out
        finally:
            with contextlib.suppress(OSError, AttributeError, TypeError):
                ctypes.CDLL(None).fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            out.text = py_out.getvalue() + tmp.read().decode(errors="replace")


def _kept_dir(call: VelaCall, network: bytes, log: str) -> str:
    """With MCU_NPU_KEEP_TEMPS set: the run's inputs and output in a kept directory."""
    if not os.environ.get(KEEP_TEMPS):
        return ""
    path = Path(tempfile.mkdtemp(prefix="mcu_npu_vela_"))
    (path / "network.tflite").write_bytes(network)
    (path / "system_config.ini").write_text(call.system_config)
    (path / "compiler_options.ini").write_text(call.compiler_options)
    (path / "vela_output.txt").write_text(log)
    return str(path)


@contextlib.contextmanager
def progress(network: bytes, stream=None):
    """On a terminal (``stream``, default stderr), one status line around the Vela run of a
    network of ``PROGRESS_BYTES`` or more, ended by its duration; nothing when the stream is
    not a terminal. The line is written before the call: Regor holds the interpreter lock
    while it compiles, so a timer could not speak during the call."""
    stream = sys.stderr if stream is None else stream
    show = len(network) >= PROGRESS_BYTES and stream.isatty()
    if show:
        stream.write(f"Vela: compiling a {len(network) / (1 << 20):.1f} MiB network ...")
        stream.flush()
    start = time.monotonic()
    try:
        yield
    finally:
        if show:
            stream.write(f" {time.monotonic() - start:.1f} s\n")
            stream.flush()


def run_vela(call: VelaCall, network: bytes):
    """(compiled model, console text) of one Regor run; failures raise NpuCompilerError.

    Regor crashes the process on bytes that are not a TFLite model, so they are refused first
    with the check the ``vela`` command makes (the file identifier).
    """
    cli, *_, regor = _import_vela()
    if int.from_bytes(network[4:8], "little") != cli.TFLITE_MAGIC:
        raise NpuCompilerError("the partition is not a TFLite flatbuffer (no 'TFL3' file "
                               "identifier); Vela was not called", tool=TOOL)
    failure = None
    with progress(network), captured_output() as out:
        try:
            compiled = regor.compile(call.architecture, network, "TFLITE", call.system_config,
                                     options=call.compiler_options)
        except (RuntimeError, ValueError) as exc:
            failure = exc
    kept = _kept_dir(call, network, out.text)
    if failure is not None:
        details = out.text.strip() + (f"\nVela inputs kept in {kept}" if kept else "")
        raise NpuCompilerError(str(failure).strip(), tool=TOOL, details=details) from failure
    return compiled, out.text
