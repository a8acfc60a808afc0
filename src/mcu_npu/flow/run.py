"""The compile flow as its sequence of stages, each a function of its own module taking and
returning plain values: check the arguments, export, rewrite, place and quantize, lower,
write and store the report, serialize, check the program, measure it on the host."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch.fx import GraphModule

from ..quantization.precision import PrecisionRequest
from ..report import Report, restore_report
from .check import check_program
from .export import export
from .inputs import check_arguments
from .int8_io import int8_io
from .lower import lower, plan_edge
from .measure import measure
from .quantize import quantize_model
from .report import write_report
from .rewrite import rewrite
from .serialize import store_report, to_executorch


@dataclass(frozen=True)
class Compiled:
    """What the flow hands the API: the ``.pte`` bytes and their report, the quantized
    reference and the float model the accuracy was measured against, the program as loaded
    for that (a ``runtime.Program``), and where the report is stored in ``buffer``
    (offset, length), for rewriting it in place."""

    buffer: bytes
    report: Report
    reference: GraphModule
    float_model: torch.nn.Module
    program: object
    report_span: tuple[int, int]


def compile_program(model, example_inputs, target, calibration, npu_compiler,
                    operators_not_to_delegate, progress, train_fn: Callable | None, io,
                    deployable=False, strict=False, accuracy_samples=None,
                    precision: PrecisionRequest = PrecisionRequest(),
                    report_slack: int = 0, stacklevel: int = 2) -> Compiled:
    """``mcu_npu.compile`` with a parsed precision request; ``report_slack`` bytes more room
    in the stored report for what a caller adds later (``CompiledProgram.rewrite_report``).
    Warnings point where ``warnings.warn(..., stacklevel=stacklevel)`` in the caller would."""
    args = check_arguments(example_inputs, target, calibration, npu_compiler,
                           operators_not_to_delegate, io, accuracy_samples, stacklevel + 1)
    float_model = model.eval() if isinstance(model, torch.nn.Module) else model
    graph = rewrite(export(float_model, args.example_inputs), args.target)
    quantized = quantize_model(graph, args, precision, train_fn, progress)
    decided = plan_edge(quantized.edge, args.target, quantized.decided)
    edge, decided = lower(quantized.edge, decided, args.target)
    edge, io_params = int8_io(edge, args.io)
    report = write_report(decided, edge, args.target, io_params, precision, quantized.choice)
    stored = store_report(edge, report, report_slack, args.accuracy_samples is not None)
    buffer = to_executorch(edge)
    check_program(buffer, report, args.target, decided, edge, deployable, strict,
                  stacklevel + 1)
    program = measure(buffer, report, float_model, quantized.reference, args.samples,
                      args.accuracy_samples)
    return Compiled(restore_report(buffer, stored, report), report, quantized.reference,
                    float_model, program, (buffer.find(stored), len(stored)))
