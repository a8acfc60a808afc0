"""The public entry points: ``compile`` a module for a target, ``load`` a ``.pte``. The
compile flow itself is ``mcu_npu.flow``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import torch

from .device.program_io import dequantize_outputs, quantize_inputs
from .errors import ConfigError, HostDataMissingError, stage
from .firmware.files import check_output, write_all
from .flow.export import exported_model
from .flow.options import CompileOptions, compile_options
from .flow.run import compile_program
from .progress import reporting
from .quantization.calibration import DEFAULT as DEFAULT_CALIBRATION
from .quantization.precision import AutoPrecision
from .report import Report
from .estimate.stream import stream_budget
from .runtime import load_program
from .runtime.pte import read_bytes


@dataclass
class CompiledProgram:
    """A compiled program: ``buffer`` is the device ``.pte`` (what the board reads, nothing
    else), ``report`` its compile report and ``host_data`` what only the host reads of it
    (the graphs behind vendor NPU payloads); ``save`` writes the ``.pte`` and, beside it, the
    companion file holding the report and the host data (``firmware.companion``). ``run``
    executes the serialized program on the host."""

    buffer: bytes
    report: Report
    reference: torch.fx.GraphModule | None = field(default=None, repr=False)
    _program: object = field(default=None, repr=False)
    float_model: torch.nn.Module | None = field(default=None, repr=False)
    """The model as given (float), for per-layer error against it."""
    host_data: dict[str, bytes] = field(default_factory=dict, repr=False)
    _plan: object = field(default=None, repr=False)
    """The placement the quantization was planned with (``flow.run.Compiled.plan``)."""

    @property
    def companion(self) -> bytes:
        """The companion file's bytes (``.ptd``): the program's digest, the report as it is
        now, the host data."""
        from .firmware.companion import pack

        return pack(self.buffer, self.report, self.host_data)

    def accuracy(self, samples) -> list[dict]:
        """Per-layer error on ``samples`` (tuples of model inputs, or tensors of a
        one-input model): one row per compute op, sorted so the op where accuracy is lost
        comes first (``mcu_npu.estimate.layers``)."""
        from .flow.measure import host_run, layer_errors

        return layer_errors(self.report, self.reference, self.float_model,
                            host_run(self.run, self.report.io), samples)

    def save_c_header(self, path: str | os.PathLike, *, name: str = "model_pte",
                      section: str | None = "auto", bundled_inputs=None) -> Path:
        """Write the ``.pte`` as a C header for firmware (``mcu_npu.firmware.c_header``): a 16-byte
        aligned ``const uint8_t name[]`` in linker section ``section`` ("auto": the one of
        the memory region the program is placed in, ``.<region>.<name>``; None: no section
        attribute), with ``#define``s for the memory pools, the regions each must live in
        and the program's I/O. With ``bundled_inputs`` (as for ``save_bundled``) the array
        holds the bundled program instead, with its tolerance as ``#define``s."""
        from .firmware.c_header import write_c_header

        bundled = None
        if bundled_inputs is not None:
            from .devtools.bundled import bundle

            bundled = bundle(self._runtime(), self.buffer, bundled_inputs)
        return write_c_header(path, self.buffer, self.report, name=name, section=section,
                              bundled=bundled)

    def detect(self, *inputs: torch.Tensor, layout, **options):
        """Run the program on ``inputs`` (float inputs are quantized for int8 I/O) and
        post-process its outputs as a detector's (``mcu_npu.detect.detect``: ``layout`` a
        ``DetectionLayout``; ``score=0.25, iou=0.45, max_boxes=100, max_candidates=1024,
        class_agnostic=False``), integer-only on int8 outputs with the report's scales. It
        reads the program's raw outputs as the C of ``save_detect_c`` does: for a program
        that split a mixed-range output into parts, ``layout`` still describes the model's
        output and each channel is read from its part, with that part's scale."""
        from .detect import detect
        from .firmware.detect_c import program_assemble

        outputs = self.run(*self.quantize_inputs(*inputs), parts=True)
        return detect(outputs, layout, self.report.io, assemble=program_assemble(self.report),
                      **options)

    def save_detect_c(self, directory: str | os.PathLike, *, layout, **options):
        """Write the detector post-processing in C, ``mcu_npu_detect.h`` and ``.c``, into
        ``directory`` (``firmware.detect_c``; options as for ``detect``): on the board it
        gives the detections ``detect`` gives on the host. Returns the two paths."""
        from .firmware.detect_c import write_detect_c

        return write_detect_c(directory, self.buffer, self.report, layout, **options)

    def save_bundled(self, path: str | os.PathLike, inputs):
        """Write a bundled program (``.bpte``, ``devtools.bundled``): the ``.pte`` with
        ``inputs`` (a list of input tuples, or of tensors for a one-input model) as test
        cases and the host run's outputs for them as the expected outputs, which firmware
        checks with ExecuTorch's ``verify_method_outputs``. Returns the ``Bundle``; its
        ``tolerance`` is what the board's outputs may differ by."""
        from .devtools.bundled import write_bundled

        return write_bundled(path, self._runtime(), self.buffer, inputs)

    def export_partitions(self, directory: str | os.PathLike) -> list[Path]:
        """Write each NPU partition's TFLite graph into ``directory`` (``partition_<k>.tflite``)
        and, for Ethos-U, Vela's optimised graph (``partition_<k>_vela.tflite``), for Netron
        or Model Explorer (``devtools.partitions``, docs/viewing.md); returns the paths."""
        self._runtime()
        return self._program.export_partitions(directory, self.report)

    def _runtime(self):
        """The host runtime's program (``runtime.Program``) of ``buffer``."""
        if self._program is None:
            self._program = LoadedProgram(load_program(self.buffer, self.host_data))
        return self._program._program

    def save(self, path: str | os.PathLike) -> Path:
        """Write the device program to ``path`` and its companion beside it
        (``model.pte`` -> ``model.ptd``, see ``companion_path``), both or neither: on any
        failure (``OutputError``) the files there before are left as they were; returns
        ``path``."""
        from .firmware.companion import companion_path

        return write_all([(path, self.buffer), (companion_path(path), self.companion)])[0]

    def run(self, *inputs: torch.Tensor, etdump: str | os.PathLike | None = None,
            debug_buffer: str | os.PathLike | None = None,
            runtime: str = "host", bundled_input_index: int | None = None,
            parts: bool = False) -> list[torch.Tensor]:
        """Execute the ``.pte``; with ``io="int8"`` it takes and returns int8 tensors (see
        ``quantize_inputs`` / ``dequantize_outputs``). A program that split a mixed-range
        output into parts returns the model's outputs put back together with float I/O, the
        parts with int8 I/O; ``parts=True``: the parts in both cases, the program's raw
        outputs as a firmware reads them. ``etdump``: write the run's ETDump
        there (``devtools.etdump``), and with ``debug_buffer`` its intermediate outputs;
        ``bundled_input_index``: which of the ETRecord's representative inputs ``inputs``
        are (0: the compile's example inputs), so ``Inspector`` pairs the run with its
        reference outputs (``compare_results``), as ExecuTorch's runtime marks a run of a
        bundled input.
        ``runtime``: ``"host"`` (the project's Python runtime) or ``"executorch"``
        (ExecuTorch's own C++ runtime, with the NPU backends' data movement done as on the
        device; needs a C++ compiler)."""
        self._runtime()
        if etdump is not None or debug_buffer is not None:
            _records_the_host(runtime)
            return _record(self._program._program, inputs, self.report, etdump, debug_buffer,
                           bundled_input_index)
        outputs = self._program.run(*inputs, runtime=runtime)
        return outputs if parts else _assembled(self.report, outputs)

    def reset_state(self) -> None:
        """Put the program's state (the buffers a stateful model writes in place, kept
        between ``run`` calls in both runtimes) back to its initial value."""
        self._runtime()
        self._program.reset_state()

    def save_selected_ops(self, path: str | os.PathLike,
                          pte_path: str | os.PathLike | None = None) -> Path:
        """Write ExecuTorch's selective-build operator list for this program (made by
        ExecuTorch's ``gen_oplist`` from the ``.pte``; ``pte_path``: where it was saved)."""
        from .firmware.kernels_list import write_selected_ops

        return write_selected_ops(self.buffer, path, pte_path)

    def quantize_inputs(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Float inputs as the program takes them: quantized with the reported input
        parameters when it was compiled with ``io="int8"``, unchanged otherwise."""
        return quantize_inputs(self.report.io, inputs)

    def dequantize_outputs(self, outputs) -> list[torch.Tensor]:
        """The program's outputs as float: dequantized with the reported output parameters
        when it was compiled with ``io="int8"``, unchanged otherwise."""
        return dequantize_outputs(self.report.io, outputs)


def compile(
    model,
    example_inputs=None,
    target: str = "imxrt700",
    calibration=None,
    npu_compiler: str = "auto",
    *,
    operators_not_to_delegate: Iterable[str] = (),
    progress: bool | None = None,
    train_fn: Callable[[torch.fx.GraphModule], None] | None = None,
    io: str = "float",
    inputs=None,
    outputs: str | None = None,
    deployable: bool = False,
    strict: bool = False,
    accuracy_samples=None,
    precision=None,
    memory: str = "auto",
    etrecord: str | os.PathLike | None = None,
    calibration_method: str = DEFAULT_CALIBRATION,
    bias_correction: bool = False,
    frame_period_ms: float | None = None,
) -> CompiledProgram:
    """Compile ``model`` for ``target``: quantize (calibrating on ``calibration``), delegate
    what the NPU takes, serialize to ``.pte``. Without calibration data the example inputs
    calibrate, with a warning. With ``train_fn`` the quantization is aware-training: the
    fake-quantized graph, its ranges started from calibration, is handed to ``train_fn``.

    ``model`` is a ``torch.nn.Module``, a ``torch.export.ExportedProgram`` or the path of a
    ``.pt2`` file (``torch.export.save``); for the last two, ``example_inputs=None`` takes
    the program's own example inputs.

    ``io="int8"`` makes the program's inputs and outputs the int8 tensors the NPU (or the
    Cortex-M int8 kernels) consume and produce: no quantize of an input, no dequantize of an
    output on the CPU; the report's ``io`` gives each one's scale and zero point, and
    ``run`` takes and returns int8 tensors (``quantize_inputs`` / ``dequantize_outputs``
    convert). ``io="float"`` (the default) keeps float inputs and outputs.

    ``inputs`` declares inputs as the sensor gives them: an ``InputSpec(dtype=, layout=,
    mean=, std=)`` (or a dict of those keys) for input 0, a list with one per input (None:
    as the model takes it) or ``{index: spec}``. The program then takes the raw data (uint8
    / int8 / int16 / float, channels first or last) and does the dtype change, layout and
    ``(x - mean) / std`` on the NPU (``flow.front``); ``example_inputs`` and
    ``calibration`` are given as the sensor gives them. ``outputs``: "int8" (the NPU's
    int8, parameters in the report's ``io``) or "float"; None follows ``io``.

    A program that would not run on the board (payloads for the host only, from the
    reference NPU compiler; an operator no kernel library of the target provides) warns;
    with ``deployable=True`` it raises ``NotDeployableError`` instead. A program that does
    not fit the target's memory warns; with ``strict=True`` it raises ``MemoryFitError``.

    ``accuracy_samples`` (input tuples, like ``calibration``) adds the per-layer error to
    the report (``report.layers``, see ``CompiledProgram.accuracy``).

    ``precision`` picks int16 activations (with int8 weights: the NPU's 16x8 kernels) where
    the target runs them: ``"int16"`` everywhere, ``{"default": "int8", "overrides":
    {name: "int16"}}`` for the modules (``"gru"``) or nodes named, or ``"auto"`` /
    ``AutoPrecision(...)`` to raise the layers that buy the most accuracy per cycle until
    a target SQNR is met within a cycle budget. The report says which ops run int16 and
    why any asked for stays int8 (``report.precision``).

    ``memory`` says where the program lives: ``"flash"`` (the NPU reads its weights in
    place from flash or off-chip memory), ``"sram"`` (the whole program in SRAM),
    ``"dedicated-sram"`` (Ethos-U65/U85: program and arena off-chip, the NPU's SRAM their
    cache), or ``"auto"`` (the default): the fastest of these whose program fits the
    target's memory map (``flow.memory``; ``report.placement`` says why).

    ``calibration_method`` chooses how each activation's quantization range is set from the
    calibration data: ``"auto"`` (the default) measures, per tensor, the quantization error
    (clipping and rounding) of the MinMax, histogram, percentile and MSE ranges and keeps
    the lowest when it beats MinMax's, provided the whole model's output SQNR on the
    calibration samples rises with those ranges (else MinMax everywhere;
    ``quantization.calibration.whole_model``); ``"minmax"`` the range the data reached;
    ``"histogram"``,
    ``"percentile"`` or ``"mse"`` use that one method everywhere
    (``mcu_npu.quantization.calibration``). The report gives each tensor's method and error
    (``report.calibration``). With ``train_fn`` the fake quantizers learn the ranges: only
    "auto" and "minmax" are accepted, and both mean the training's moving-average min / max.

    ``bias_correction=True`` corrects each convolution's and linear layer's bias after
    calibration so that its int8 outputs keep the float model's per-channel means on the
    calibration samples (rounded weights shift them, most in depthwise and small-fan-in
    layers), kept only where the whole model's output SQNR on those samples rises
    (``quantization.calibration.bias_correction``; ``report.calibration`` gives the
    verdict). Not with ``train_fn``: training sets the biases.

    ``frame_period_ms``: the time between two calls of a program run as a stream (10 for
    10 ms audio frames); the report's ``stream`` then gives a call's estimated time against
    it, the margin to spare and whether it fits (``report.stream``). A model that keeps
    state between calls (buffers it writes in place) gets a program that keeps it: int8 in
    the program's mutable buffers, read and written by the NPU, reset by ``reset_state()``
    (``report.state``); its calibration samples are a stream, in order.

    ``etrecord`` names a file to write the compile's ETRecord to, for ExecuTorch's
    ``Inspector`` (``docs/debugging.md``); the device program is the same without it.

    ``progress=True`` shows each stage on stderr as it starts, with the seconds elapsed
    (``mcu_npu.progress``; a calibration bar on a terminal); None (the default) shows them
    when stderr is a terminal, False never."""
    options = compile_options(
        target=target, npu_compiler=npu_compiler,
        operators_not_to_delegate=operators_not_to_delegate, train_fn=train_fn, io=io,
        inputs=inputs, outputs=outputs, deployable=deployable, strict=strict,
        precision=precision, memory=memory, calibration_method=calibration_method,
        bias_correction=bias_correction, frame_period_ms=frame_period_ms)
    return compile_with(model, example_inputs, calibration, options,
                        accuracy_samples=accuracy_samples, progress=progress, etrecord=etrecord)


def compile_with(model, example_inputs, calibration, options: CompileOptions, *,
                 accuracy_samples=None, progress: bool | None = None,
                 etrecord: str | os.PathLike | None = None) -> CompiledProgram:
    """``compile`` with its options as one checked value (``flow.options.compile_options``):
    what the CLI calls, having built the options before loading the model."""
    with reporting(progress):  # stage lines while it runs (``mcu_npu.progress``)
        if etrecord is not None:
            check_output(etrecord)  # before the compile, not after it
            if isinstance(options.precision, AutoPrecision):
                raise ConfigError("etrecord= is not available with precision='auto': compile "
                                  "with the precision the search chose (report.precision) to "
                                  "record it")
        with stage("reading the model", show=False):
            model, example_inputs = exported_model(model, example_inputs)
        if isinstance(options.precision, AutoPrecision):
            from .flow.auto_precision import search

            prog = search(model, example_inputs, calibration, accuracy_samples, options,
                          progress=progress, compile_fn=_compile)
        else:
            # any failure the stages below do not name
            with stage("compiling the model", show=False):
                prog = _compile(model, example_inputs, calibration, accuracy_samples, options,
                                etrecord=etrecord)
    prog.report.stream = stream_budget(prog.report, options.frame_period_ms)
    return prog


def _compile(model, example_inputs, calibration, accuracy_samples, options, *, etrecord=None,
             **kwargs) -> CompiledProgram:
    """The compile flow (``flow.run.compile_program``, same arguments) as a
    ``CompiledProgram``, with its ETRecord written to ``etrecord`` when given."""
    c = compile_program(model, example_inputs, calibration, accuracy_samples, options,
                        keep_edges=etrecord is not None, **kwargs)
    if etrecord is not None:
        from .devtools.etrecord import write_etrecord

        example = example_inputs
        example = (example,) if isinstance(example, torch.Tensor) else tuple(example)
        if c.program_io is not None:
            from .flow.front import as_float

            example = as_float(c.program_io, example)  # as the front takes them
        with torch.no_grad():
            expected = c.float_model(*example)
        write_etrecord(etrecord, *c.edges, example, expected)
    return CompiledProgram(c.buffer, c.report, c.reference, _program=LoadedProgram(c.program),
                           float_model=c.float_model, host_data=c.host_data, _plan=c.plan)


class LoadedProgram:
    """A ``.pte`` read back for host execution, with its companion when it has one: the
    compile report and the graphs the host runs vendor NPU payloads with."""

    def __init__(self, program, companion=None, companion_name: str | None = None):
        self._program = program
        self._companion = companion
        self._companion_name = companion_name

    @property
    def companion(self):
        """The companion read with the program (``firmware.companion.Companion``), or None."""
        return self._companion

    def run(self, *inputs: torch.Tensor, etdump: str | os.PathLike | None = None,
            debug_buffer: str | os.PathLike | None = None,
            runtime: str = "host", bundled_input_index: int | None = None,
            parts: bool = False) -> list[torch.Tensor]:
        """See ``CompiledProgram.run`` (the ETDump's times come from the companion's
        report)."""
        from .runtime.executorch import run_with

        try:
            if etdump is not None or debug_buffer is not None:
                _records_the_host(runtime)
                return _record(self._program, inputs, self.report, etdump, debug_buffer,
                               bundled_input_index)
            outputs = run_with(runtime, self._program, inputs)
            if parts:
                return outputs
            return _assembled(self._companion.report if self._companion is not None else None,
                              outputs)
        except HostDataMissingError:
            if self._companion_name is None:
                raise
            raise HostDataMissingError(
                f"running this program on the host needs its companion file "
                f"{self._companion_name} (written beside the .pte by compile or save), not "
                f"found; the .pte alone runs only on the board") from None

    def reset_state(self) -> None:
        """Put the program's state (its mutable buffers) back to its initial value, in the
        host runtime and in ExecuTorch's: the next run starts as the first did."""
        from .runtime.executorch import reset_state

        self._program.reset_state()
        reset_state(self._program)

    @property
    def report(self) -> Report | None:
        """The compile report: the companion's, or (without one) what the device program
        itself holds (``Report.device_only``); None for a ``.pte`` mcu-npu did not write."""
        report = self._companion.report if self._companion is not None else None
        if report is None:
            report = _report_in_program(self._program)
        if report is None:
            return None
        if not report.kernels:  # read from the serialized program, not stored with it
            from .firmware.kernels_list import fill_report

            fill_report(report, self._program)
        if not report.memory:
            from .estimate.memory import memory_report

            report.memory = memory_report(self._program, None, report)
        return report

    @property
    def input_specs(self):
        return self._program.input_specs

    def export_partitions(self, directory: str | os.PathLike, report=None) -> list[Path]:
        """See ``CompiledProgram.export_partitions`` (the graphs of vendor payloads come
        from the companion file)."""
        from .devtools.partitions import export

        return export(self._program, report if report is not None else self.report, directory)

    def detect(self, *inputs: torch.Tensor, layout, **options):
        """See ``CompiledProgram.detect`` (the int8 parameters and the record of a split
        output from the report read with the program)."""
        from .detect import detect
        from .firmware.detect_c import program_assemble

        report = self.report
        outputs = self.run(*self.quantize_inputs(*inputs), parts=True)
        return detect(outputs, layout, report.io if report else {},
                      assemble=program_assemble(report), **options)

    def quantize_inputs(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """See ``CompiledProgram.quantize_inputs`` (uses the report read with the program)."""
        report = self.report
        return quantize_inputs(report.io if report else {}, inputs)

    def dequantize_outputs(self, outputs) -> list[torch.Tensor]:
        """See ``CompiledProgram.dequantize_outputs`` (uses the report read with the program)."""
        report = self.report
        return dequantize_outputs(report.io if report else {}, outputs)


def _records_the_host(runtime: str) -> None:
    if runtime != "host":
        raise ConfigError(f"etdump= records a run of the host runtime, not of runtime "
                          f"{runtime!r}: leave runtime at 'host'")


def _record(program, inputs, report, etdump, debug_buffer,
            bundled_input_index=None) -> list[torch.Tensor]:
    """Run ``program`` writing an ETDump (``devtools.etdump.record_run``)."""
    if etdump is None:
        raise ConfigError("debug_buffer= holds the intermediate outputs of an ETDump: give "
                          "etdump= too")
    from .devtools.etdump import record_run

    return record_run(program, inputs, report, etdump, debug_buffer,
                      bundled_input_index=bundled_input_index)


def check_bundled(path_or_bytes, companion=None):
    """Run a bundled program's (``.bpte``) inputs on the host and compare the outputs with
    its expected outputs, exactly (``devtools.bundled.check_file``; ``.ok``). The host runs
    vendor NPU payloads with the program's companion: ``companion``, or the ``.ptd`` beside
    a path."""
    from .devtools.bundled import check_file

    return check_file(path_or_bytes, companion)


def _assembled(report: Report | None, outputs: list) -> list:
    """The model's outputs from a program whose mixed-range outputs were split into parts
    (``device.output_parts``); with int8 outputs the parts as the firmware reads them
    (``dequantize_outputs`` dequantizes and assembles them)."""
    if report is None or "assemble" in (report.io or {}):
        return outputs
    from .device.output_parts import assemble

    return assemble((report.program_io or {}).get("assemble"), outputs)


def _report_in_program(program) -> Report | None:
    """The report a ``.pte`` gives by itself: the whole report in a program written before
    the companion file existed, else the device-only report (``firmware.device_only``)."""
    from .firmware.companion import REPORT_KEY
    from .firmware.device_only import device_report

    raw = program.device_named_data.get(REPORT_KEY)
    if raw is not None:
        return Report.from_json(raw)
    return device_report(program)


def load(path_or_bytes, companion=None) -> LoadedProgram:
    """Read a ``.pte`` (path or bytes) for execution on the host, with its companion file:
    ``companion`` (a path, or the file's bytes) or, for a path, the ``.ptd`` beside it when
    there is one. A companion written for another program is refused."""
    from .firmware.companion import resolve

    data = read_bytes(path_or_bytes)
    found, name = resolve(path_or_bytes, data, companion)
    program = load_program(data, found.host_data if found is not None else None)
    return LoadedProgram(program, found, name)
