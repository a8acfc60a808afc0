"""The quantizer of a whole SoC: NPU rules where the NPU runs a node, Cortex-M rules elsewhere.

Which nodes the NPU runs is decided by the partitioner's own support checks (a
``Placement``), so each side gets the quantization its kernels need. Where an NPU node and a
Cortex-M node meet, the consumer reuses the producer's observer: the tensor crossing the
boundary has one set of parameters, and no requantization is inserted between the two.

Without a placement, the quantizer decides one on a trial (``decide_placement``): it
quantizes a copy of the graph with the NPU's rules alone, lowers it to Edge and asks the
partitioner. The checks read shapes, arguments and graph structure, never quantization
values, so synthetic inputs decide as well as calibration data does.
"""

from __future__ import annotations

import copy
from typing import Callable, Iterable

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.quantizer import (
    QuantizationAnnotation,
    Quantizer,
    SharedQuantizationSpec,
)

from ..graph_ids import NODE_ID, node_id, tag_nodes  # noqa: F401  (NODE_ID re-exported)
from ..partition.placement import Placement, analyse_edge
from ..pipeline import to_edge_program
from ..targets import get_target
from .annotators import KEY
from .cortex_m import cortex_m_quantizer
from .neutron_quantizer import NeutronQuantizer, quantize

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


def decide_placement(model: GraphModule, target, excluded: Iterable[str] = (),
                     npu_compiler: str = "auto") -> Placement:
    """Trial: quantize a copy of ``model`` with the NPU's rules, lower it, check it."""
    trial = copy.deepcopy(model)
    inputs = synthetic_inputs(trial)
    reference = quantize(trial, inputs, [inputs], NeutronQuantizer())
    edge = to_edge_program(reference, inputs)
    return Placement.from_analysis(analyse_edge(edge.exported_program(), target, excluded,
                                                npu_compiler))


class TargetQuantizer(Quantizer):
    """Composition of the NPU quantizer and the Cortex-M quantizer for one target.

    ``placement`` says which nodes the NPU runs; without one, ``annotate`` decides it with the
    partitioner's checks on a trial quantization (``decide_placement``).
    ``mcu_npu.compile`` passes the placement it already knows; the ExecuTorch recipes let the
    quantizer decide. Both give the same answer: the checks do not depend on calibration data.
    """

    def __init__(
        self,
        target,
        *,
        is_qat: bool = False,
        operators_not_to_delegate: Iterable[str] = (),
        aten_passes: Iterable = (),
        placement=None,
    ):
        super().__init__()
        self.target = get_target(target)
        self.is_qat = is_qat
        self.excluded = tuple(operators_not_to_delegate)
        self.aten_passes = list(aten_passes)
        self.placement = placement

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        model = NeutronQuantizer(aten_passes=self.aten_passes).transform_for_annotation(model)
        return tag_nodes(model)

    def annotate(self, model: GraphModule) -> GraphModule:
        if self.placement is None:
            self.placement = decide_placement(model, self.target, self.excluded)
        on_npu: Callable[[Node], bool] = lambda n: self.placement.on_npu(node_id(n))
        NeutronQuantizer(is_qat=self.is_qat, node_filter=on_npu).annotate(model)
        for node in model.graph.nodes:
            if node.op == "call_function" and on_npu(node):
                node.meta[_MATCHED] = True
        if self.placement.cpu:
            on_cpu = lambda n: n.op == "call_function" and not on_npu(n)
            scalars_to_constants(model, [n for n in model.graph.nodes if on_cpu(n)])
            cortex_m_quantizer(on_cpu, is_qat=self.is_qat).annotate(model)
            share_boundaries(model, on_npu)
        return model

    def validate(self, model: GraphModule) -> None:
        return None


_BINARY = {
    aten.add.Scalar: aten.add.Tensor, aten.sub.Scalar: aten.sub.Tensor,
    aten.mul.Scalar: aten.mul.Tensor, aten.div.Scalar: aten.div.Tensor,
    aten.add.Tensor: aten.add.Tensor, aten.sub.Tensor: aten.sub.Tensor,
    aten.mul.Tensor: aten.mul.Tensor, aten.div.Tensor: aten.div.Tensor,
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
    its input with the producer's output observer."""
    for node in model.graph.nodes:
        ann: QuantizationAnnotation | None = node.meta.get(KEY)
        if node.op != "call_function" or ann is None:
            continue
        for arg, spec in list(ann.input_qspec_map.items()):
            producer = arg.meta.get(KEY)
            if spec is None or arg.op != "call_function" or producer is None or \
                    producer.output_qspec is None or on_npu(arg) == on_npu(node):
                continue
            ann.input_qspec_map[arg] = SharedQuantizationSpec(arg)
