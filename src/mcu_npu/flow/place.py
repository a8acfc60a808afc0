"""Place: where every node runs, decided once, before the real quantization, by a trial: a
copy quantized with the NPU's rules alone, lowered to Edge and checked by the partitioner's
support checks and the NPU compiler's own (``partition.plan.plan_program``). The outcome is
a frozen ``Plan``.

The checks read shapes, arguments and graph structure, never quantization values, so
synthetic inputs decide as well as calibration data does. The trial lives here, above the
quantizers and the partitioner it runs, so neither of those packages reaches up into the
compile flow: the composed quantizer is handed the plan, or this module's ``plan`` as its
planner.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import replace
from types import MappingProxyType
from typing import Callable, ContextManager, Iterable, Mapping

import torch
from torch.export import ExportedProgram
from torch.fx import GraphModule

from ..backend.cortex_m import cortex_m_core, cortex_m_rejection
from ..errors import ConfigError, stage
from ..graph.ids import node_id, tag_nodes
from ..partition.placement import Placement
from ..partition.plan import Plan, PlanOptions, fingerprint, plan_program
from ..quantization import NpuQuantizer, quantize
from .edge import to_edge_program

PLACING = "deciding what the NPU runs"
"""The stage that places (``errors.stage``)."""


def exclude_hint(op: str) -> str:
    """What to do when deciding or delegating what the NPU runs fails at ``op``."""
    if not op:
        return ("keep the op off the NPU with operators_not_to_delegate=[...] (CLI: --exclude "
                "OP; the report names each op), change the model around it, or report it")
    return (f"keep {op} off the NPU with operators_not_to_delegate=[{op!r}] (CLI: --exclude "
            f"{op}), change the model around it, or report it")


def place(graph: GraphModule, target, options: PlanOptions) -> Plan:
    """The stage: ``plan``, its failures named as the stage's."""
    with stage(PLACING, exclude_hint):
        return plan(graph, target, options)


def synthetic_inputs(model: GraphModule, seed: int = 0) -> tuple:
    """Deterministic inputs shaped like the graph's placeholders (their ``val`` metadata)."""
    gen = torch.Generator().manual_seed(seed)
    inputs = []
    for node in model.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise ValueError(f"input {node.name} has no tensor metadata; export the model "
                             "with torch.export before quantizing")
        if val.dtype.is_floating_point:
            inputs.append(torch.randn(tuple(val.shape), generator=gen).to(val.dtype))
        else:
            inputs.append(torch.zeros(tuple(val.shape), dtype=val.dtype))
    return tuple(inputs)


def plan(aten_program_or_graph, target, options: PlanOptions = PlanOptions()) -> Plan:
    """Decide, once, where every node of an ATen graph runs: quantize a copy with the NPU's
    rules alone, lower it to Edge, and check it (``partition.plan.plan_program``). The
    plan's ``fingerprint`` is that of the graph as the quantizer annotates it. A
    ``quantization.composed.Planner``."""
    return trial(aten_program_or_graph, target, options)[0]


def trial(aten_program_or_graph, target, options: PlanOptions = PlanOptions(), *,
          graph_in_place: bool = False, example_inputs: tuple | None = None,
          stages: Mapping[str, Callable[[], ContextManager]] | None = None):
    """(the ``Plan``, the trial's quantized reference, the trial's Edge program). With
    ``graph_in_place`` the given graph itself is quantized (``compile`` keeps the trial as
    its result when the NPU takes everything); ``stages`` wraps the steps ``"quantize"``,
    ``"edge"`` and ``"check"`` (``errors.stage``)."""
    graph = aten_program_or_graph
    if isinstance(graph, ExportedProgram):
        graph = graph.module()
    if not isinstance(graph, GraphModule):
        raise ConfigError(f"plan takes an ATen GraphModule or ExportedProgram, not a "
                          f"{type(graph).__name__}")
    step = lambda name: (stages or {}).get(name, nullcontext)()  # noqa: E731
    model = tag_nodes(graph if graph_in_place else copy.deepcopy(graph))
    samples = list(options.calibration) if options.calibration is not None \
        else [synthetic_inputs(model)]
    example_inputs = tuple(example_inputs) if example_inputs is not None else samples[0]
    quantizer = _Trial(calibration_method=options.calibration_method,
                       bias_correction=options.bias_correction)
    with step("quantize"):
        reference = quantize(model, example_inputs, samples, quantizer)
    with step("edge"):
        edge = to_edge_program(reference, example_inputs)
    with step("check"):
        decided = plan_program(edge.exported_program(), target, options, Placement())
        portable = portable_nodes(reference, decided.placement, decided.target)
    return replace(decided, fingerprint=quantizer.fingerprint, portable=portable), \
        reference, edge


def portable_nodes(model: GraphModule, placement: Placement, target) -> Mapping[str, str]:
    """ATen node id -> why the target's Cortex-M kernels cannot take that CPU node
    (``backend.cortex_m.cortex_m_rejection``); empty for a target without Cortex-M kernels."""
    if cortex_m_core(target) is None or not placement.cpu:
        return MappingProxyType({})
    portable = {}
    for node in model.graph.nodes:
        ident = node_id(node)
        if ident in placement.cpu and ident not in portable:
            reason = cortex_m_rejection(node)
            if reason is not None:
                portable[ident] = reason
    return MappingProxyType(portable)


class _Trial(NpuQuantizer):
    """The NPU's quantizer, noting the fingerprint of the graph it annotates: the graph the
    composed quantizer annotates after the same preparation."""

    fingerprint = ""

    def annotate(self, model):
        self.fingerprint = fingerprint(model)
        return super().annotate(model)


def decide_placement(model: GraphModule, target, excluded: Iterable[str] = (),
                     npu_compiler: str = "auto") -> Placement:
    """Trial: quantize a copy of ``model`` with the NPU's rules, lower it, check it."""
    return plan(model, target, PlanOptions(tuple(excluded), npu_compiler)).placement
