"""The public entry points: ``compile`` a module for a target, ``load`` a ``.pte``."""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import torch
from executorch.exir import to_edge

from .errors import ConfigError, InvalidProgramError
from .npu import COMPILER_NAMES
from .partition import NpuPartitioner
from .pipeline import default_aten_passes, edge_compile_config, export_module
from .quantization import NeutronQuantizer, quantize, quantize_qat
from .report import REPORT_KEY, OpPlacement, PartitionInfo, Report, node_macs
from .targets import get_target


@dataclass
class CompiledProgram:
    """A compiled ``.pte`` with its report; ``run`` executes the serialized bytes on the host."""

    buffer: bytes
    report: Report
    reference: torch.fx.GraphModule | None = field(default=None, repr=False)
    _program: object = field(default=None, repr=False)

    def save(self, path: str | os.PathLike) -> Path:
        return write_atomic(path, self.buffer)

    def run(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        if self._program is None:
            self._program = load(self.buffer)
        return self._program.run(*inputs)


def write_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file, so no partial file is ever left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _as_inputs(x) -> tuple:
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
            s = torch.as_tensor(s)
            if tuple(s.shape) != tuple(e.shape):
                raise ConfigError(f"calibration sample {i}, input {j} has shape "
                                  f"{tuple(s.shape)} but the model's example input has "
                                  f"{tuple(e.shape)}")
            if s.dtype != e.dtype:
                raise ConfigError(f"calibration sample {i}, input {j} has dtype {s.dtype} but "
                                  f"the model's example input has {e.dtype}")
        checked.append(tuple(torch.as_tensor(s) for s in sample))
    if not checked:
        raise ConfigError("calibration data is empty")
    return checked


def _progress(samples: list, show: bool | None) -> Iterable[tuple]:
    show = len(samples) >= 16 and sys.stderr.isatty() if show is None else show
    for i, s in enumerate(samples, 1):
        if show:
            sys.stderr.write(f"\rcalibrating {i}/{len(samples)}")
            sys.stderr.flush()
        yield s
    if show:
        sys.stderr.write("\n")


def compile(
    model: torch.nn.Module,
    example_inputs,
    target: str = "imxrt700",
    calibration=None,
    npu_compiler: str = "auto",
    *,
    operators_not_to_delegate: Iterable[str] = (),
    progress: bool | None = None,
    train_fn: Callable[[torch.fx.GraphModule], None] | None = None,
) -> CompiledProgram:
    """Compile ``model`` for ``target``: quantize (calibrating on ``calibration``), delegate
    what the NPU takes, serialize to ``.pte``. Without calibration data the example inputs
    calibrate, with a warning. With ``train_fn`` the quantization is aware-training: the
    fake-quantized graph, its ranges started from calibration, is handed to ``train_fn``."""
    tgt = get_target(target)
    if npu_compiler not in COMPILER_NAMES:
        raise ConfigError(f"unknown npu_compiler {npu_compiler!r}; choose one of: "
                          f"{', '.join(COMPILER_NAMES)}")
    example_inputs = _as_inputs(example_inputs)
    if calibration is None:
        warnings.warn("no calibration data: calibrating on the example inputs alone, so "
                      "quantization ranges will be narrow and results inaccurate; pass "
                      "calibration samples", UserWarning, stacklevel=2)
        samples = [example_inputs]
    else:
        samples = check_calibration(calibration, example_inputs)
    float_model = model.eval() if isinstance(model, torch.nn.Module) else model
    graph = export_module(float_model, example_inputs)
    quantizer = NeutronQuantizer(is_qat=train_fn is not None, aten_passes=default_aten_passes(tgt))
    if train_fn is None:
        reference = quantize(graph, example_inputs, _progress(samples, progress), quantizer)
    else:
        reference = quantize_qat(graph, example_inputs, _progress(samples, progress), train_fn,
                                 quantizer)

    partitioner = NpuPartitioner(tgt, operators_not_to_delegate, npu_compiler)
    edge = lower(reference, example_inputs, partitioner)
    report = build_report(tgt.name, partitioner, edge)
    report.accuracy = {}
    edge._named_data_store.add_named_data(REPORT_KEY, report.to_json().encode())
    buffer = to_executorch(edge)
    prog = CompiledProgram(buffer, report, reference)
    report.accuracy = measure_accuracy(float_model, reference, prog, samples[:4])
    return prog


def lower(reference: torch.fx.GraphModule, example_inputs: tuple, partitioner):
    """Quantized reference -> Edge program with the NPU partitions delegated.

    One decomposition pass with the converter's preserved ops, then ``to_backend``: cheaper
    than ``to_edge_transform_and_lower``, which decomposes twice (it matters for unrolled
    recurrent graphs with thousands of nodes).
    """
    ep = torch.export.export(reference, example_inputs)
    edge = to_edge(ep, compile_config=edge_compile_config())
    partitioner.refine(edge.exported_program())
    return edge.to_backend(partitioner)


def to_executorch(edge) -> bytes:
    """Serialize an Edge program; CPU-side quantize/dequantize need the quantized kernels'
    out variants registered first."""
    import executorch.kernels.quantized  # noqa: F401  (registers quantized_decomposed.*.out)

    return bytes(edge.to_executorch().buffer)


def build_report(target: str, partitioner: NpuPartitioner, edge) -> Report:
    """Placement of every compute op and the per-partition compiler output."""
    infos = _delegate_infos(edge)
    where = {}
    for k, tag in enumerate(partitioner.partitions):
        for name in partitioner.partitions[tag]:
            where[name] = k
    ops = []
    for name, v in partitioner.verdicts.items():
        k = where.get(name)
        if k is not None:
            ops.append(OpPlacement(name, v.op, f"NPU partition {k}", "npu", "",
                                   partitioner.macs.get(name, 0)))
        else:
            reason = v.reason or "its neighbours left no NPU partition worth making"
            ops.append(OpPlacement(name, v.op, "CPU", "portable", reason,
                                   partitioner.macs.get(name, 0)))
    parts = [
        PartitionInfo(k, partitioner.partitions[tag], info.get("compiler", "?"),
                      info.get("tflite_ops", []), info.get("stats", {}))
        for k, (tag, info) in enumerate(zip(partitioner.partitions, infos))
    ]
    compilers = sorted({p.compiler for p in parts}) or ["none"]
    notes = [n for info in infos for n in info.get("notes", [])]
    return Report(target, "+".join(compilers), ops, parts, notes=notes)


def _delegate_infos(edge) -> list[dict]:
    gm = edge.exported_program().graph_module
    infos = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and "executorch_call_delegate" in str(node.target):
            lowered = getattr(gm, node.args[0].target)
            infos.append(lowered.meta.get("_delegate_info_meta", {}))
    return infos


def measure_accuracy(float_model, reference, prog: CompiledProgram, samples) -> dict:
    """SQNR (dB) of the host-run ``.pte`` and of the quantized reference against float."""
    from .metrics import sqnr_db

    refs, tests, floats = [], [], []
    with torch.no_grad():
        for s in samples:
            floats.append(_first(float_model(*s)))
            refs.append(_first(reference(*s)))
            tests.append(prog.run(*s)[0])
    f = torch.cat([t.flatten() for t in floats])
    return {
        "sqnr_db": round(sqnr_db(f, torch.cat([t.flatten() for t in tests])), 2),
        "reference_sqnr_db": round(sqnr_db(f, torch.cat([t.flatten() for t in refs])), 2),
    }


def _first(out) -> torch.Tensor:
    while isinstance(out, (list, tuple)):
        out = out[0]
    return out


class LoadedProgram:
    """A ``.pte`` read back for host execution, with its compile report when it has one."""

    def __init__(self, program):
        self._program = program

    def run(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        return self._program.run(*inputs)

    @property
    def report(self) -> Report | None:
        raw = self._program.named_data.get(REPORT_KEY)
        return Report.from_json(raw) if raw is not None else None

    @property
    def input_specs(self):
        return self._program.input_specs


def load(path_or_bytes) -> LoadedProgram:
    """Read a ``.pte`` (path or bytes) for execution on the host."""
    from .runtime import load_program

    if isinstance(path_or_bytes, (str, os.PathLike)) and not Path(path_or_bytes).is_file():
        raise InvalidProgramError(f"program file {str(path_or_bytes)!r} not found")
    return LoadedProgram(load_program(path_or_bytes))
