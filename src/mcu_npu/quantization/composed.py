"""The quantizer of a whole SoC: NPU rules where the NPU runs a node, Cortex-M rules elsewhere.

Which nodes the NPU runs is the plan's (``plan`` below makes a ``partition.plan.Plan``): the
partitioner's own support checks on a trial, so each side gets the quantization its kernels need. Where an NPU node
and a Cortex-M node meet, the consumer reuses the producer's observer: the tensor crossing
the boundary has one set of parameters, and no requantization is inserted between the two.

Given a plan made for the graph it annotates, the quantizer applies it; given none, or one
made for another graph, it plans the graph it is given (the trial quantizes a copy with the
NPU's rules alone, lowers it to Edge and checks it). The checks read shapes, arguments and
graph structure, never quantization values, so synthetic inputs decide as well as
calibration data does. The quantizer keeps nothing between calls: it stamps the decision on
the graph (``partition.placement.stamp_placement``), where the partitioner reads it.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import replace
from types import MappingProxyType
from typing import Callable, ContextManager, Iterable, Mapping

import torch
from torch.export import ExportedProgram
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.quantizer import (
    QuantizationAnnotation,
    Quantizer,
    SharedQuantizationSpec,
)

from ..cortex_m import cortex_m_core, cortex_m_rejection
from ..errors import ConfigError
from ..graph_ids import NODE_ID, node_id, tag_nodes  # noqa: F401  (NODE_ID re-exported)
from ..partition.placement import Placement, stamp_placement
from ..partition.plan import Plan, PlanOptions, fingerprint, plan_program
from ..passes.aten.decompose_on_cpu import decompose_on_cpu
from ..pipeline import to_edge_program
from ..targets import get_target
from .annotators import KEY, output_dtype
from .cortex_m import cortex_m_quantizer
from .neutron_quantizer import NeutronQuantizer, quantize
from .precision import PrecisionChoice

aten = torch.ops.aten

# the Cortex-M pattern matcher skips nodes already claimed by another quantizer
_MATCHED = "quantizer_matched"


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
    plan's ``fingerprint`` is that of the graph as the quantizer annotates it."""
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
    quantizer = _Trial()
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
    (``cortex_m.cortex_m_rejection``); empty for a target without Cortex-M kernels."""
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


class _Trial(NeutronQuantizer):
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


class TargetQuantizer(Quantizer):
    """Composition of the NPU quantizer and the Cortex-M quantizer for one target.

    ``plan`` (``partition.plan.plan``) says which nodes the NPU runs; ``annotate`` applies it
    to the graph it was made for, and plans any other graph itself with ``options`` (the
    plan's when one is given). ``mcu_npu.compile`` passes the plan it already made; the
    ExecuTorch recipes let the quantizer plan. Both give the same answer: the checks do not
    depend on calibration data. ``precision`` (a ``PrecisionChoice`` resolved on the graph)
    gives the NPU nodes it names int16 activations; the Cortex-M side stays int8.
    """

    def __init__(
        self,
        target,
        *,
        is_qat: bool = False,
        operators_not_to_delegate: Iterable[str] = (),
        aten_passes: Iterable = (),
        npu_compiler: str = "auto",
        plan: Plan | None = None,
        precision: PrecisionChoice | None = None,
    ):
        super().__init__()
        self.target = get_target(target)
        self.is_qat = is_qat
        self.precision = precision
        self.aten_passes = list(aten_passes)
        if plan is not None:
            if plan.target != self.target:
                raise ConfigError(f"the plan is for {plan.target.name}, not {self.target.name}")
            if tuple(operators_not_to_delegate) or npu_compiler != "auto":
                raise ConfigError("give operators_not_to_delegate and npu_compiler either to "
                                  "the quantizer or to its plan (PlanOptions), not both")
            self.options = PlanOptions(plan.options.operators_not_to_delegate,
                                       plan.options.npu_compiler)
        else:
            self.options = PlanOptions(tuple(operators_not_to_delegate), npu_compiler)
        self.plan = plan

    @property
    def excluded(self) -> tuple[str, ...]:
        return self.options.operators_not_to_delegate

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        model = NeutronQuantizer(aten_passes=self.aten_passes).transform_for_annotation(model)
        return tag_nodes(model)

    def plan_for(self, model: GraphModule) -> Plan:
        """The given plan when it was made for ``model``, else ``model`` planned now."""
        if self.plan is not None and self.plan.made_for(model):
            return self.plan
        return plan(model, self.target, self.options)

    def annotate(self, model: GraphModule) -> GraphModule:
        decided = self.plan_for(model)
        placement = decided.placement
        stamp_placement(model, placement)
        on_npu: Callable[[Node], bool] = lambda n: placement.on_npu(node_id(n))
        decompose_on_cpu(model, [n for n in model.graph.nodes if n.op == "call_function"
                                 and not on_npu(n) and not _cortex_m_fuses(n, on_npu)])
        NeutronQuantizer(is_qat=self.is_qat, node_filter=on_npu,
                         precision=self.precision).annotate(model)
        for node in model.graph.nodes:
            if node.op == "call_function" and on_npu(node):
                node.meta[_MATCHED] = True
            elif node.op == "call_function" and node_id(node) in decided.portable:
                # stays float: an empty annotation keeps every Cortex-M rule off it (the
                # shared-quantization rule spreads to any neighbour not yet annotated)
                node.meta[KEY] = QuantizationAnnotation(_annotated=True)
        if placement.cpu:
            on_cpu = lambda n: n.op == "call_function" and not on_npu(n) and \
                node_id(n) not in decided.portable  # noqa: E731
            scalars_to_constants(model, [n for n in model.graph.nodes if on_cpu(n)])
            cortex_m_quantizer(on_cpu, is_qat=self.is_qat).annotate(model)
            share_boundaries(model, on_npu)
        return model

    def validate(self, model: GraphModule) -> None:
        return None


_FUSING = {aten.conv1d.default, aten.conv2d.default, aten.conv_transpose2d.input,
           aten.linear.default}


def _cortex_m_fuses(node: Node, on_npu: Callable[[Node], bool]) -> bool:
    """A hard-sigmoid / hard-swish the Cortex-M lowering takes whole: right after a CPU
    convolution or linear layer (its fused patterns)."""
    producer = node.args[0] if node.args else None
    return node.target in (aten.hardsigmoid.default, aten.hardswish.default) and \
        isinstance(producer, Node) and producer.op == "call_function" and \
        producer.target in _FUSING and not on_npu(producer) and len(producer.users) == 1


_BINARY = {
    aten.add.Scalar: aten.add.Tensor, aten.sub.Scalar: aten.sub.Tensor,
    aten.mul.Scalar: aten.mul.Tensor, aten.div.Scalar: aten.div.Tensor,
    aten.add.Tensor: aten.add.Tensor, aten.sub.Tensor: aten.sub.Tensor,
    aten.mul.Tensor: aten.mul.Tensor, aten.div.Tensor: aten.div.Tensor,
    # in place (``out += 0``): torch.export's graph keeps them until Edge functionalizes it
    aten.add_.Scalar: aten.add_.Tensor, aten.sub_.Scalar: aten.sub_.Tensor,
    aten.mul_.Scalar: aten.mul_.Tensor, aten.div_.Scalar: aten.div_.Tensor,
    aten.add_.Tensor: aten.add_.Tensor, aten.sub_.Tensor: aten.sub_.Tensor,
    aten.mul_.Tensor: aten.mul_.Tensor, aten.div_.Tensor: aten.div_.Tensor,
}


def scalars_to_constants(model: GraphModule, nodes: Iterable[Node]) -> None:
    """Binary ops of ``nodes`` with a Python number operand get it as a constant tensor: the
    Cortex-M kernels take two quantized tensors, so the number needs its own quantization."""
    for node in nodes:
        if node.target not in _BINARY or len(node.args) < 2 or \
                not isinstance(node.args[1], (int, float)) or isinstance(node.args[1], bool):
            continue
        value = torch.tensor(float(node.args[1]))
        name = f"_mcu_npu_scalar_{node.name}"
        model.register_buffer(name, value)
        with model.graph.inserting_before(node):
            const = model.graph.get_attr(name)
        const.meta["val"] = _fake(node, value)
        node.args = (node.args[0], const, *node.args[2:])
        node.target = _BINARY[node.target]
    model.recompile()


def _fake(node: Node, value: torch.Tensor):
    """``value`` as a fake tensor of the graph's fake mode (pattern checks read ``val``)."""
    for arg in node.all_input_nodes:
        mode = getattr(arg.meta.get("val"), "fake_mode", None)
        if mode is not None:
            return mode.from_tensor(value)
    return value


def share_boundaries(model: GraphModule, on_npu: Callable[[Node], bool]) -> None:
    """Where a tensor crosses between the NPU's and the CPU's nodes, the consumer quantizes
    its input with the producer's output observer. An input the consumer's own rule already
    shares (the Cortex-M rule of ``where``, ``cat``: inputs and output one group) is left
    alone: re-pointing it makes torchao's sharing groups recurse without end. An int16 NPU
    output read by an int8 CPU kernel keeps the consumer's own parameters: a requantize."""
    for node in model.graph.nodes:
        ann: QuantizationAnnotation | None = node.meta.get(KEY)
        if node.op != "call_function" or ann is None:
            continue
        for arg, spec in list(ann.input_qspec_map.items()):
            producer = arg.meta.get(KEY)
            if spec is None or isinstance(spec, SharedQuantizationSpec) or \
                    arg.op != "call_function" or producer is None or \
                    producer.output_qspec is None or on_npu(arg) == on_npu(node) or \
                    output_dtype(arg) != getattr(spec, "dtype", None):
                continue  # a shared spec already ties the input into its consumer's group
            ann.input_qspec_map[arg] = SharedQuantizationSpec(arg)
