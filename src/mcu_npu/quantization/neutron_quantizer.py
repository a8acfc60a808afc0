"""The PT2E quantizer for the eIQ Neutron NPU."""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.quantizer import Quantizer

from .annotators import ANNOTATORS, packet_of, share_recurrent_states
from .qspecs import QuantSpecs

NodeFilter = Callable[[Node], bool]


class NeutronQuantizer(Quantizer):
    """int8 quantizer whose choices the TFLite int8 kernels and the Neutron NPU accept.

    Use with torchao's ``prepare_pt2e`` (``is_qat=False``) or ``prepare_qat_pt2e``
    (``is_qat=True``) and ``convert_pt2e``. ``node_filter`` restricts annotation to the nodes
    it accepts, which lets this quantizer be composed with another one.
    ``aten_passes`` run in ``transform_for_annotation`` (e.g. the recurrent decompositions).
    """

    def __init__(
        self,
        *,
        is_qat: bool = False,
        node_filter: NodeFilter | None = None,
        aten_passes: Iterable = (),
    ):
        super().__init__()
        self.is_qat = is_qat
        self.specs = QuantSpecs(is_qat=is_qat)
        self.node_filter = node_filter
        self.aten_passes = list(aten_passes)

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        for p in self.aten_passes:
            result = p(model)
            model = result.graph_module if result is not None else model
        return model

    def annotate(self, model: GraphModule) -> GraphModule:
        for node in model.graph.nodes:
            if node.op != "call_function" or "quantization_annotation" in node.meta:
                continue
            annotator = ANNOTATORS.get(packet_of(node))
            if annotator is None or not _floating_output(node):
                continue
            if self.node_filter is not None and not self.node_filter(node):
                continue
            annotator(node, self.specs)
        share_recurrent_states(model.graph, self.specs)
        return model

    def validate(self, model: GraphModule) -> None:
        return None

    @staticmethod
    def supported_ops() -> list:
        """ATen op packets this quantizer annotates."""
        return sorted(ANNOTATORS, key=str)


def _floating_output(node: Node) -> bool:
    """Only floating-point results are quantized (not e.g. BN's ``num_batches_tracked += 1``)."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return all(v.dtype.is_floating_point for v in vals if isinstance(v, torch.Tensor))


def quantize(
    model: torch.nn.Module | GraphModule,
    example_inputs: tuple,
    calibration: Iterable[tuple] | None = None,
    quantizer: Quantizer | None = None,
) -> GraphModule:
    """Export (if needed), prepare, calibrate and convert ``model``; returns the PT2E module.

    The result is the quantized reference: running it in PyTorch gives the numbers an int8
    deployment must reproduce.
    """
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = quantizer or NeutronQuantizer()
    if not isinstance(model, GraphModule):
        model = torch.export.export(model.eval(), tuple(example_inputs)).module(
            check_guards=False
        )
    prepared = prepare_pt2e(model, quantizer)
    for sample in calibration if calibration is not None else [tuple(example_inputs)]:
        prepared(*sample)
    return convert_pt2e(prepared)


def quantize_qat(
    model: GraphModule,
    example_inputs: tuple,
    calibration: Iterable[tuple],
    train_fn: Callable[[GraphModule], None],
    quantizer: Quantizer,
) -> GraphModule:
    """Quantization-aware training: fake-quantize, start the ranges from calibration (the PTQ
    starting point), let ``train_fn(model)`` train it, then convert to the quantized program."""
    from torchao.quantization.pt2e import move_exported_model_to_eval, move_exported_model_to_train
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_qat_pt2e

    prepared = prepare_qat_pt2e(model, quantizer)
    with torch.no_grad():
        for sample in calibration:
            prepared(*sample)
    move_exported_model_to_train(prepared)
    train_fn(prepared)
    move_exported_model_to_eval(prepared)
    return convert_pt2e(prepared)
