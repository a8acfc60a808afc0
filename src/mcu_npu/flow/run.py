"""The compile flow as its sequence of stages, each a function of its own module taking and
returning plain values: check the arguments, export, rewrite, place and quantize, lower,
write the report, serialize, check the program, measure it on the host."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch.fx import GraphModule

from ..graph.module_names import module_meta, restore_module_meta
from ..passes.aten.keep_mixed_range_cat_float import NOTES_KEY
from ..passes.guarded import failures as pass_failures
from ..partition.plan import Plan
from ..quantization.pinned_inputs import pinned
from ..quantization.state_encoding import tied
from ..upstream.patches import compile_patches
from ..report import Report
from .approximate import note as approximation_note, rewrite_approximating
from .softmax_form import choose as choose_softmax_form, note as softmax_form_note
from .check import check_program
from .collector import earlier_objects_frozen
from .export import export, in_eval_mode
from .front import fold_normalisation, front, pinned_ranges
from .int8_io import take_integer_inputs
from .inputs import check_arguments
from .options import CompileOptions
from .lower import plan_edge
from .memory import lower_in_memory
from .measure import measure
from .quantize import quantize_model
from .report import record_calibration
from .state import lift_state, state_pairs, streamed


@dataclass(frozen=True)
class Compiled:
    """What the flow hands the API: the device ``.pte`` bytes, the host graphs its companion
    carries (named-data key -> bytes), the report, the quantized reference and the float
    model the accuracy was measured against, and the program as loaded for that (a
    ``runtime.Program``)."""

    buffer: bytes
    host_data: dict[str, bytes]
    report: Report
    reference: GraphModule
    float_model: torch.nn.Module
    program: object
    edges: tuple | None = None
    """With ``keep_edges``: (the Edge program before delegation, the emitter's debug maps of
    ``buffer``), for the ETRecord (``devtools.etrecord``)."""
    plan: object = None
    """The placement the quantization was planned with (``partition.plan.Plan``; None when
    it was planned while quantizing), for another compile of the same model and target
    (``plan=``)."""
    program_io: object = None
    """The declared program I/O (``io_spec.ProgramIO``) ``float_model`` takes its inputs by."""


def compile_program(model, example_inputs, calibration, accuracy_samples,
                    options: CompileOptions, *, keep_edges: bool = False,
                    plan=None, started: dict | None = None) -> Compiled:
    """``mcu_npu.compile`` of ``model`` with ``options`` (checked: ``flow.options``; its
    precision a ``PrecisionRequest``). Warnings name the user's line that called into
    mcu-npu (``errors.warn_user``). ``plan``: the
    ``Compiled.plan`` of a compile of the same model for the same target and options (the
    precision search's trials), used where it was made for the graph. ``started``: a dict
    the caller keeps across compiles of one model with the same arguments but the precision
    (the search's trials): the first compile leaves its float model and rewritten graph
    there, the others start from them instead of exporting and rewriting again. The
    compile's upstream patches are entered once, here (``upstream.patches.COMPILE_WIDE``:
    graph modules get their code when it is used, among others)."""
    with compile_patches(), earlier_objects_frozen():
        return _run(model, example_inputs, calibration, accuracy_samples, options,
                    keep_edges, plan, started)


def _run(model, example_inputs, calibration, accuracy_samples, options: CompileOptions,
         keep_edges, plan, started) -> Compiled:
    """``compile_program``'s stages."""
    args = check_arguments(example_inputs, calibration, accuracy_samples, options)
    precision, train_fn = options.precision, options.train_fn
    calibration_method = options.calibration_method
    if started:  # quantization leaves the rewritten graph as it found it only in a copy
        float_model, graph = started["float_model"], copy.deepcopy(started["graph"])
        state, stepper = started["state"], started["stepper"]
        approximation = started["approximation"]
    else:
        float_model = front(in_eval_mode(model), args.program_io, args.example_inputs)
        graph, state = lift_state(fold_normalisation(export(float_model, args.example_inputs),
                                                     args.program_io))
        graph, approximation = rewrite_approximating(
            graph, args.target, None if state else args.samples, calibration_method,
            options.operators_not_to_delegate)
        stepper = copy.deepcopy(graph) if state else None  # the float function of the state
        if started is not None:
            started.update(float_model=float_model, graph=copy.deepcopy(graph), state=state,
                           stepper=stepper, approximation=approximation)
    frames = args  # the calls as the model takes them: the program keeps the state
    args = streamed(args, stepper, state)
    names = module_meta(graph)  # the model's layer names, lost by quantization's re-export
    with pinned(pinned_ranges(args.program_io)), tied(state_pairs(state, graph)):
        quantized = quantize_model(graph, args, precision, train_fn, plan)
    restore_module_meta(quantized.edge.exported_program().graph_module, names)
    take_integer_inputs(quantized.edge, args.program_io)
    softmax_form = None if state else choose_softmax_form(
        quantized.edge.exported_program().graph_module, quantized.reference, float_model,
        args.samples, args.target)
    decided = plan_edge(quantized.edge, args.target, quantized.decided)
    before = copy.deepcopy(quantized.edge) if keep_edges else None
    placed = lower_in_memory(quantized.edge, decided, args.target, args.memory,
                             args.program_io, precision, quantized.choice)
    buffer, host_data, report = placed.buffer, placed.host_data, placed.report
    report.notes += [n for n in pass_failures(graph) + graph.meta.get(NOTES_KEY, [])
                     if n not in report.notes]
    if approximation:
        report.notes.append(approximation_note(approximation))
    if softmax_form:
        report.notes.append(softmax_form_note(softmax_form))
    record_calibration(report, quantized.reference, "qat" if train_fn else calibration_method)
    program = check_program(placed, options.deployable, options.strict)
    program = measure(program, report, stepper or float_model, quantized.reference,
                      frames.samples, frames.accuracy_samples, state)
    return Compiled(buffer, host_data, report, quantized.reference, float_model, program,
                    (before, placed.debug) if keep_edges else None,
                    quantized.decided if isinstance(quantized.decided, Plan) else None,
                    args.program_io)
