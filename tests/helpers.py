"""Shared test helpers: quantize -> convert -> run in LiteRT, and error measures."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import warnings

import numpy as np
import torch
from torch import nn

from mcu_npu.estimate.metrics import sqnr_db  # noqa: F401  (re-exported for tests)
from mcu_npu.flow.edge import to_edge_program
from mcu_npu.flow.export import export_module
from mcu_npu.quantization import NpuQuantizer, quantize
from mcu_npu.runtime.litert import run_model
from mcu_npu.tflite import convert
from zoo.checks import (  # noqa: F401  (re-exported for tests)
    as_list, assert_loads_in_executorch, assert_same_outputs, calibration_set)

FLOAT_PRECISION_DB = 100.0
"""An SQNR above this is float rounding, not quantization: its exact value depends on the
host's float kernels, so two such figures compare only as "both exact", never within a
tolerance."""


def sqnr_holds(host: float, reference: float, margin_db: float = 1.0) -> bool:
    """``host`` SQNR no more than ``margin_db`` below ``reference``: the numerics contract.
    A host figure at float precision holds; a reference at float precision needs one."""
    if host >= FLOAT_PRECISION_DB:
        return True
    return reference < FLOAT_PRECISION_DB and host >= reference - margin_db


def sqnr_close(a: float, b: float, margin_db: float = 1.0) -> bool:
    """Two SQNRs within ``margin_db`` of each other, or both at float precision."""
    if a >= FLOAT_PRECISION_DB or b >= FLOAT_PRECISION_DB:
        return a >= FLOAT_PRECISION_DB and b >= FLOAT_PRECISION_DB
    return abs(a - b) <= margin_db


def run_tflite(model, inputs) -> list[np.ndarray]:
    """Run a converted TFLiteModel on PyTorch inputs; outputs back in PyTorch layout."""
    return run_model(model, inputs)


def assert_warned_at(caught, text: str, filename: str, line: int) -> None:
    """The one warning of ``caught`` whose message holds ``text`` names ``filename`` at
    ``line``: the user's call, however deep in mcu-npu it was raised."""
    (w,) = [w for w in caught if text in str(w.message)]
    assert (os.path.realpath(w.filename), w.lineno) == (os.path.realpath(filename), line), \
        (w.filename, w.lineno)


class Branchy(nn.Module):
    """Two branches joined by an add (the partition tests' model: an op kept off the NPU
    inside one branch or at the join splits its partitions)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 1)
        self.c = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.a(x))
        return torch.sigmoid(self.c(y) + torch.tanh(self.b(y)))


def quantized_edge(model, example_inputs, calibration=None, quantizer=None):
    """(quantized reference module, its Edge program) for ``model`` (a module or an exported
    GraphModule): export -> quantize (NPU rules) -> Edge."""
    if not isinstance(model, torch.fx.GraphModule):
        model = export_module(model, example_inputs)
    reference = quantize(model, example_inputs, calibration, quantizer or NpuQuantizer())
    return reference, to_edge_program(reference, example_inputs)


def convert_module(module, example_inputs, calibration=None):
    """(quantized reference, TFLiteModel, edge program) for a float module."""
    module = module.eval()
    calibration = calibration if calibration is not None else calibration_set(example_inputs)
    reference, edge = quantized_edge(module, example_inputs, calibration)
    return reference, convert(edge.exported_program()), edge


def output_step(edge) -> list[float]:
    """The output quantization step of each graph output (from its final dequantize)."""
    out = [n for n in edge.exported_program().graph.nodes if n.op == "output"][0]
    return [float(a.args[1]) for a in out.args[0]]


def reference_output_steps(reference) -> list[float]:
    """Output quantization steps of a quantized reference GraphModule (its final dequantizes)."""
    out = [n for n in reference.graph.nodes if n.op == "output"][0]
    args = out.args[0]
    args = args if isinstance(args, (list, tuple)) else [args]
    return [float(a.args[1]) for a in args]


def fit(model, x, y, optimizer, epochs: int, batch: int) -> None:
    """Cross-entropy training over shuffled mini-batches (seeded order, last partial batch
    dropped)."""
    g = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=g)
        for i in range(0, len(x) - batch + 1, batch):
            idx = order[i:i + batch]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()


def assert_same_program(a, b, samples, a_name: str = "a", b_name: str = "b") -> None:
    """Two compiles gave the same program: the same ``.pte`` bytes, report accuracy and,
    on every sample (a tuple of inputs), the same outputs bit for bit."""
    assert a.buffer == b.buffer, f"{a_name} and {b_name} give different .pte bytes"
    assert a.report.accuracy == b.report.accuracy
    for sample in samples:
        assert_same_outputs(a.run(*sample), b.run(*sample), a_name, b_name)

DEVICE_OVERHEAD_LIMIT = 4096
"""Bytes a device ``.pte`` may hold beyond its NPU payloads, its constants and ExecuTorch's
per-entry tables (docs/companion.md)."""
TABLE_BYTES_PER_VALUE = 96
"""What ExecuTorch's program tables take per value of a method, at most (measured: 55 to 71
bytes per value in the test programs with many CPU kernels)."""
TABLE_BYTES_PER_DELEGATE = 256
"""What they take per delegate entry (backend id, compile spec, data reference, the call
instruction), at most."""


def device_split(buffer: bytes) -> dict:
    """A ``.pte`` read with ExecuTorch's own deserializer: its bytes, NPU payload bytes,
    constant bytes, named data by key, values over all methods, and the rest
    (``overhead``)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    pte = deserialize_pte_binary(bytes(buffer))
    payloads = sum(len(bytes(d.data)) for d in pte.program.backend_delegate_data)
    constants = sum(len(bytes(b.storage)) for b in pte.program.constant_buffer)
    named = {} if pte.named_data is None else {
        key: len(bytes(pte.named_data.buffers[e.buffer_index]))
        for key, e in pte.named_data.pte_data.items()}
    return {"bytes": len(buffer), "payloads": payloads, "constants": constants,
            "named_data": named, "overhead": len(buffer) - payloads - constants,
            "values": sum(len(plan.values) for plan in pte.program.execution_plan),
            "delegates": sum(len(plan.delegates) for plan in pte.program.execution_plan)}


def assert_device_program_is_lean(buffer: bytes) -> None:
    """The device ``.pte`` holds what a board reads: the NPU payloads, the constants and the
    program tables, nothing kept for the host. The tables take at most 4 KiB beyond
    ExecuTorch's per-entry cost of the program's values and delegates."""
    split = device_split(buffer)
    assert not split["named_data"], \
        f"the device .pte holds named data no device runtime reads: {sorted(split['named_data'])}"
    limit = DEVICE_OVERHEAD_LIMIT + TABLE_BYTES_PER_VALUE * split["values"] \
        + TABLE_BYTES_PER_DELEGATE * split["delegates"]
    assert split["overhead"] <= limit, \
        f"{split['overhead']:,} bytes of the .pte are neither NPU payloads nor constants " \
        f"(at most {limit:,}): {split}"


class MixedNpuCpu(torch.nn.Module):
    """Convs the NPU takes around a gelu it does not (so it runs on the CPU), then a linear:
    a model whose placement splits between the NPU and the Cortex-M."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 8 * 8, 6)

    def forward(self, x):
        y = torch.nn.functional.gelu(torch.relu(self.a(x)))
        return self.fc(torch.relu(self.b(y)).flatten(1))


class Resize(torch.nn.Module):
    """``F.interpolate`` with fixed arguments."""

    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, x):
        return torch.nn.functional.interpolate(x, **self.kwargs)


class ConvResize(torch.nn.Module):
    """A convolution first, so the resize reads a channels-last NPU tensor."""

    def __init__(self, **kwargs):
        super().__init__()
        self.conv, self.resize = torch.nn.Conv2d(3, 8, 3, padding=1), Resize(**kwargs)

    def forward(self, x):
        return self.resize(self.conv(x))


def run_cli(*args, cwd=None, in_process: bool = True) -> subprocess.CompletedProcess:
    """``mcu-npu ARGS`` as a ``CompletedProcess`` (returncode, stdout, stderr). In process by
    default: ``cli.main`` with its output captured, the warning filters, logger levels and
    working directory it may change restored after; ``in_process=False`` runs
    ``python -m mcu_npu.cli`` (the entry point itself, at the cost of a fresh interpreter)."""
    args = [str(a) for a in args]
    if not in_process:
        return subprocess.run([sys.executable, "-m", "mcu_npu.cli", *args],
                              capture_output=True, text=True, cwd=cwd, timeout=300)
    from mcu_npu.cli import main

    out, err = io.StringIO(), io.StringIO()
    loggers = {name: logging.getLogger(name).level
               for name in ("", "torch", "torchao", "executorch", "torch._subclasses.fake_tensor")}
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(here)
        for name, level in loggers.items():
            logging.getLogger(name).setLevel(level)
    return subprocess.CompletedProcess(["mcu-npu", *args], code, out.getvalue(), err.getvalue())


def value_layout(v):
    """A node value's shape, dtype and strides (nested for tuples), or its type's name."""
    if isinstance(v, torch.Tensor):
        return tuple(v.shape), v.dtype, v.stride()
    if isinstance(v, (tuple, list)):
        return tuple(value_layout(x) for x in v)
    return type(v).__name__
