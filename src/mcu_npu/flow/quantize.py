"""Quantize: PT2E quantization with the target's rules, post-training (calibrated on the
samples) or aware-training (``train_fn``), with int16 activations where asked and the NPU
runs them. The result is the quantized reference, its Edge program and the placement."""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Callable

from executorch.exir import EdgeProgramManager
from torch.fx import GraphModule

from ..backend.cortex_m import cortex_m_core
from ..errors import stage
from ..partition.plan import Plan, PlanOptions
from ..quantization import NpuQuantizer, quantize, quantize_qat
from ..quantization.composed import PlanMismatch, TargetQuantizer
from ..quantization.precision import PrecisionChoice, PrecisionRequest, resolve
from .edge import TO_EDGE, to_edge_program
from .inputs import Arguments
from .place import PLACING, exclude_hint, place, plan, trial

QUANTIZE_HINT = "change how the model uses {op}, or report it"
QAT_HINT = ("the exception came from train_fn or the fake-quantized graph it ran (see the "
            "chained exception); fix it there, or report it")


@dataclass(frozen=True)
class Quantized:
    """The quantized reference and its Edge program; ``decided``: the plan the trial made
    for that program, or the options it is planned with once lowered (``lower.plan_edge``);
    ``choice``: the int16 activations resolved on the graph (None: int8 throughout)."""

    reference: GraphModule
    edge: EdgeProgramManager
    decided: Plan | PlanOptions
    choice: PrecisionChoice | None


def quantize_model(graph: GraphModule, args: Arguments, precision: PrecisionRequest,
                   train_fn: Callable[[GraphModule], None] | None,
                   known: Plan | None = None) -> Quantized:
    """The stage: ``ptq``, or ``qat`` when there is a ``train_fn``."""
    samples = args.samples
    if train_fn is None:
        return ptq(graph, args.example_inputs, samples, args.target, args.plan_options, precision,
                   known)
    return qat(graph, args.example_inputs, samples, train_fn, args.target, args.plan_options,
               precision)


def ptq(graph, example_inputs, samples, target, options: PlanOptions,
        precision: PrecisionRequest = PrecisionRequest(), known: Plan | None = None) -> Quantized:
    """PTQ with the NPU's rules, which is the plan's trial; where the plan leaves ops to a
    Cortex-M CPU, or ``precision`` asks for int16 activations, quantize again with the
    composed quantizer so those ops get the Cortex-M rules and the int16 ones the 16x8
    specs. With int16 asked for, a ``known`` plan made for this graph (same model, target
    and options: the precision search's trials) stands for the trial."""
    samples = list(samples)
    fallback = cortex_m_core(target) is not None
    mixed = not precision.all_int8
    if mixed and fallback and known is not None and \
            replace(known.options, calibration=None) == replace(options, calibration=None):
        attempt = copy.deepcopy(graph)
        try:  # the composed quantizer checks the plan was made for the graph it annotates
            return _requantize(attempt, example_inputs, samples, target, known,
                               resolve_precision(precision, attempt, known), fallback,
                               options, planner=None)
        except PlanMismatch:
            pass  # planned anew below
    stages = {"quantize": lambda: stage("quantizing and calibrating", QUANTIZE_HINT),
              "edge": lambda: stage(TO_EDGE),
              "check": lambda: stage(PLACING if fallback else "delegating to the NPU",
                                     exclude_hint)}
    # with int16 asked for, the trial only places (its checks read no quantization values)
    # and the program is quantized again anyway: one calibration sample does
    decided, reference, edge = trial(graph, target,
                                     replace(options, calibration=samples[:1] if mixed
                                             else samples,
                                             bias_correction=options.bias_correction
                                             and not mixed),
                                     graph_in_place=not fallback and not mixed,
                                     example_inputs=example_inputs, stages=stages)
    choice = resolve_precision(precision, graph, decided) if mixed else None
    if not mixed and (not fallback or not decided.placement.cpu):
        return Quantized(reference, edge, decided, choice)
    return _requantize(graph, example_inputs, samples, target, decided, choice, fallback,
                       options)


def _requantize(graph, example_inputs, samples, target, decided: Plan,
                choice: PrecisionChoice | None, fallback: bool, options: PlanOptions,
                planner=plan) -> Quantized:
    """``graph`` quantized as ``decided`` places it: the Cortex-M rules off the NPU (with
    ``fallback``; ``planner``: what plans a graph ``decided`` was not made for, None to
    raise ``PlanMismatch``), 16x8 specs where ``choice`` says, activation ranges and bias
    correction as ``options`` say (its ``calibration_method``, ``bias_correction``)."""
    method, correct = options.calibration_method, options.bias_correction
    with stage("quantizing for the NPU and the Cortex-M kernels", exclude_hint):
        quantizer = TargetQuantizer(target, plan=decided, planner=planner, precision=choice,
                                    calibration_method=method, bias_correction=correct) \
            if fallback else NpuQuantizer(precision=choice, calibration_method=method,
                                              bias_correction=correct)
        reference = quantize(graph, example_inputs, samples, quantizer)
    with stage(TO_EDGE):
        return Quantized(reference, to_edge_program(reference, example_inputs), decided,
                         choice)


def qat(graph, example_inputs, samples, train_fn, target, options: PlanOptions,
        precision: PrecisionRequest = PrecisionRequest()) -> Quantized:
    """QAT: the fake-quantized graph, its ranges started from calibration, handed to
    ``train_fn``; with the composed quantizer's rules where the target has Cortex-M
    kernels, placed first when ``precision`` asks for int16 activations."""
    planned = choice = None
    if not precision.all_int8:
        planned = place(graph, target, options)
        choice = resolve_precision(precision, graph, planned)
    if not cortex_m_core(target):
        quantizer = NpuQuantizer(is_qat=True, precision=choice)
    elif planned is not None:  # the plan carries the exclusions and the compiler; QAT
        # annotates the graph with its batch norms (the trial's PTQ folds them), so a graph
        # with any is planned again by the planner
        quantizer = TargetQuantizer(target, is_qat=True, plan=planned, planner=plan,
                                    precision=choice)
    else:
        quantizer = TargetQuantizer(target, is_qat=True,
                                    operators_not_to_delegate=options.operators_not_to_delegate,
                                    npu_compiler=options.npu_compiler, planner=plan)
    with stage("quantization-aware training", QAT_HINT):
        reference = quantize_qat(graph, example_inputs, samples, train_fn, quantizer)
    with stage(TO_EDGE):
        edge = to_edge_program(reference, example_inputs)
    return Quantized(reference, edge, options, choice)


def resolve_precision(request: PrecisionRequest, graph, decided: Plan) -> PrecisionChoice:
    """``request`` on ATen ``graph``, where ``decided`` places its nodes: a node the plan
    leaves to the CPU stays int8 (the Cortex-M kernels are), with the reason."""
    cpu = {n.ident for n in decided.nodes if n.partition is None} | set(decided.placement.cpu)
    with stage("choosing the activation precision"):
        return resolve(request, graph, decided.target, cpu.__contains__,
                       {n.node: n.ident for n in decided.nodes if n.ident})
