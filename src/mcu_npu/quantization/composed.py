"""The quantizer of a whole SoC: NPU rules where the NPU runs a node, Cortex-M rules elsewhere.

Which nodes the NPU runs is the plan's (a ``partition.plan.Plan``, made by the placement
trial, ``mcu_npu.flow.place``), so each side gets the quantization its kernels need. Where
an NPU node and a Cortex-M node meet, the consumer reuses the producer's observer: the
tensor crossing the boundary has one set of parameters, and no requantization is inserted
between the two.

Given a plan made for the graph it annotates, the quantizer applies it; given none, or one
made for another graph, it asks its planner for the graph it is given. The quantizer keeps
nothing between calls: it stamps the decision on the graph
(``partition.placement.stamp_placement``), where the partitioner reads it.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.quantizer import (
    FixedQParamsQuantizationSpec,
    QuantizationAnnotation,
    Quantizer,
    SharedQuantizationSpec,
)

from ..errors import ConfigError
from ..graph.ids import node_id, tag_nodes
from ..partition.placement import stamp_placement
from ..partition.plan import Plan, PlanOptions
from ..passes.aten.decompose_on_cpu import decompose_on_cpu
from ..targets import Target, get_target
from ..passes.aten.saturate_attention_mask import MASK_KEY
from .annotators import KEY, annotate_masked_add, output_dtype
from .calibration import DEFAULT, check_method
from .cortex_m import cortex_m_quantizer
from .npu_quantizer import NpuQuantizer
from .precision import PrecisionChoice
from .qspecs import QuantSpecs

aten = torch.ops.aten

# the Cortex-M pattern matcher skips nodes already claimed by another quantizer
_MATCHED = "quantizer_matched"

Planner = Callable[[GraphModule, Target, PlanOptions], Plan]
"""Makes the plan of an ATen graph (``mcu_npu.flow.place.plan``: the placement trial)."""


class PlanMismatch(ConfigError):
    """A ``TargetQuantizer`` without a planner was given a plan made for another graph."""


class TargetQuantizer(Quantizer):
    """Composition of the NPU quantizer and the Cortex-M quantizer for one target.

    ``plan`` (a ``partition.plan.Plan``) says which nodes the NPU runs; ``annotate`` applies
    it to the graph it was made for, and has any other graph planned by ``planner`` with
    ``options`` (the plan's when one is given). ``mcu_npu.compile`` passes the plan it
    already made; the ExecuTorch recipes pass the placement trial as the planner
    (``mcu_npu.flow.place.plan``). Both give the same answer: the checks do not depend on
    calibration data. ``precision`` (a ``PrecisionChoice`` resolved on the graph) gives the
    NPU nodes it names int16 activations; the Cortex-M side stays int8.
    ``calibration_method`` chooses every activation's range, on both sides
    (``calibration.METHODS``).
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
        planner: Planner | None = None,
        precision: PrecisionChoice | None = None,
        calibration_method: str = DEFAULT,
        bias_correction: bool = False,
    ):
        super().__init__()
        self.target = get_target(target)
        self.is_qat = is_qat
        self.calibration_method = check_method(calibration_method)
        self.bias_correction = bias_correction
        self.precision = precision
        self.aten_passes = list(aten_passes)
        if plan is not None:
            if plan.target != self.target:
                raise ConfigError(f"the plan is for {plan.target.name}, not {self.target.name}")
            if tuple(operators_not_to_delegate) or npu_compiler != "auto":
                raise ConfigError("give operators_not_to_delegate and npu_compiler either to "
                                  "the quantizer or to its plan (PlanOptions), not both")
            self.options = PlanOptions(plan.options.operators_not_to_delegate,
                                       plan.options.npu_compiler,
                                       calibration_method=self.calibration_method)
        else:
            self.options = PlanOptions(tuple(operators_not_to_delegate), npu_compiler,
                                       calibration_method=self.calibration_method)
        self.plan = plan
        self.planner = planner

    @property
    def excluded(self) -> tuple[str, ...]:
        return self.options.operators_not_to_delegate

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        model = NpuQuantizer(aten_passes=self.aten_passes).transform_for_annotation(model)
        return tag_nodes(model)

    def plan_for(self, model: GraphModule) -> Plan:
        """The given plan when it was made for ``model``, else ``model`` planned now by the
        planner."""
        if self.plan is not None and self.plan.made_for(model):
            return self.plan
        if self.planner is None:
            raise PlanMismatch("the quantizer has no plan for this graph: give it the graph's "
                               "plan (plan=) or a planner (planner=mcu_npu.flow.place.plan)")
        return self.planner(model, self.target, self.options)

    def annotate(self, model: GraphModule) -> GraphModule:
        decided = self.plan_for(model)
        placement = decided.placement
        stamp_placement(model, placement)
        on_npu: Callable[[Node], bool] = lambda n: placement.on_npu(node_id(n))
        decompose_on_cpu(model, [n for n in model.graph.nodes if n.op == "call_function"
                                 and not on_npu(n) and not _cortex_m_fuses(n, on_npu)])
        NpuQuantizer(is_qat=self.is_qat, node_filter=on_npu, precision=self.precision,
                         calibration_method=self.calibration_method).annotate(model)
        for node in model.graph.nodes:
            if node.op == "call_function" and on_npu(node):
                node.meta[_MATCHED] = True
            elif node.op == "call_function" and node_id(node) in decided.portable:
                # stays float: an empty annotation keeps every Cortex-M rule off it (the
                # shared-quantization rule spreads to any neighbour not yet annotated)
                node.meta[KEY] = QuantizationAnnotation(_annotated=True)
        for node in model.graph.nodes:
            if node.meta.get(MASK_KEY) and not on_npu(node):
                # an attention mask add saturates on the CPU too: any other rule would
                # quantize its -3.4e38 entries into the scale of the scores after it
                annotate_masked_add(node, QuantSpecs(is_qat=self.is_qat,
                                                     calibration=self.calibration_method))
        if placement.cpu:
            on_cpu = lambda n: n.op == "call_function" and not on_npu(n) and \
                node_id(n) not in decided.portable and not n.meta.get(MASK_KEY)  # noqa: E731
            scalars_to_constants(model, [n for n in model.graph.nodes if on_cpu(n)])
            cortex_m_quantizer(on_cpu, is_qat=self.is_qat,
                               calibration_method=self.calibration_method).annotate(model)
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
    output read by an int8 CPU kernel keeps the consumer's own parameters: a requantize.
    A CPU kernel reading an attention mask add shares its saturated range the same way
    (its own observer would see the unsaturated -3.4e38 scores), and so does one reading a
    fixed-range output (the Cortex-M quantizer's softmax): its own observer would only add
    a requantize from the fixed range to nearly the same one, rounding the values twice."""
    for node in model.graph.nodes:
        ann: QuantizationAnnotation | None = node.meta.get(KEY)
        if node.op != "call_function" or ann is None:
            continue
        for arg, spec in list(ann.input_qspec_map.items()):
            producer = arg.meta.get(KEY)
            crossing = on_npu(arg) != on_npu(node) or arg.meta.get(MASK_KEY) or \
                isinstance(getattr(producer, "output_qspec", None),
                           FixedQParamsQuantizationSpec)
            if spec is None or isinstance(spec, SharedQuantizationSpec) or \
                    arg.op != "call_function" or producer is None or \
                    producer.output_qspec is None or not crossing or \
                    output_dtype(arg) != getattr(spec, "dtype", None):
                continue  # a shared spec already ties the input into its consumer's group
            ann.input_qspec_map[arg] = SharedQuantizationSpec(arg)
