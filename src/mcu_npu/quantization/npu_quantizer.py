"""The PT2E quantizer of the NPU side: the TFLite int8 kernels' rules, which every NPU compiler
here takes (``NeutronQuantizer`` is its former name)."""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, Quantizer

from ..passes.aten._recurrent import one_recompile
from ..passes.aten.keep_mixed_range_cat_float import MIXED_RANGE_KEY
from ..passes.guarded import run_passes
from .calibration import DEFAULT, check_method
from .annotators import annotator_of, output_dtype, share_recurrent_states
from .precision import PrecisionChoice, follows_input
from .qspecs import QuantSpecs

NodeFilter = Callable[[Node], bool]


class NpuQuantizer(Quantizer):
    """int8 quantizer whose choices the TFLite int8 kernels, and so every NPU compiler here
    (Vela, the eIQ Neutron converter), accept.

    Use with torchao's ``prepare_pt2e`` (``is_qat=False``) or ``prepare_qat_pt2e``
    (``is_qat=True``) and ``convert_pt2e``. ``node_filter`` restricts annotation to the nodes
    it accepts, which lets this quantizer be composed with another one.
    ``aten_passes`` run in ``transform_for_annotation`` (e.g. the recurrent decompositions).
    ``precision`` (a ``PrecisionChoice``) gives its nodes int16 activations, and the data
    movement that reads them (``precision.follows_input``); the rest is int8.
    ``calibration_method`` chooses each activation's range (``calibration.METHODS``; "auto"
    picks per tensor); QAT's fake quantizers ignore it. With ``bias_correction``
    ``quantize`` corrects the layers' biases after calibration
    (``calibration.bias_correction``).
    """

    def __init__(
        self,
        *,
        is_qat: bool = False,
        node_filter: NodeFilter | None = None,
        aten_passes: Iterable = (),
        precision: PrecisionChoice | None = None,
        calibration_method: str = DEFAULT,
        bias_correction: bool = False,
    ):
        super().__init__()
        self.is_qat = is_qat
        self.calibration_method = check_method(calibration_method)
        self.bias_correction = bias_correction
        self.specs = QuantSpecs(is_qat=is_qat, calibration=calibration_method)
        self.specs16 = QuantSpecs(is_qat=is_qat, int16=True, calibration=calibration_method)
        self.node_filter = node_filter
        self.aten_passes = list(aten_passes)
        self.precision = precision

    def specs_of(self, node: Node) -> QuantSpecs:
        """int16 specs for the nodes the precision choice names and the data movement that
        follows an int16 input; int8 otherwise."""
        if self.precision is None or not self.precision.int16:
            return self.specs
        if self.precision.asks_int16(node):
            return self.specs16
        x = node.args[0] if node.args else None
        if isinstance(x, (list, tuple)) and x:
            x = x[0]  # cat: its first input
        int16_input = isinstance(x, Node) and output_dtype(x) == torch.int16
        return self.specs16 if follows_input(node, int16_input) else self.specs

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        with one_recompile():  # the passes edit graphs only: their code is made once
            return run_passes(self.aten_passes, model)  # one that fails is skipped

    def annotate(self, model: GraphModule) -> GraphModule:
        for node in model.graph.nodes:
            if node.meta.get(MIXED_RANGE_KEY) and "quantization_annotation" not in node.meta:
                node.meta["quantization_annotation"] = QuantizationAnnotation(_annotated=True)
        for node in model.graph.nodes:
            if node.op != "call_function" or "quantization_annotation" in node.meta:
                continue
            annotator = annotator_of(node)  # the operator table's rule
            if annotator is None or not _floating_output(node):
                continue
            if self.node_filter is not None and not self.node_filter(node):
                continue
            annotator(node, self.specs_of(node))
        share_recurrent_states(model.graph, lambda n: self.specs_of(n).activation)
        return model

    def validate(self, model: GraphModule) -> None:
        return None

    @staticmethod
    def supported_ops() -> list:
        """ATen op packets this quantizer annotates (those of the operator table)."""
        from ..tflite.registry import ANNOTATIONS

        return sorted(ANNOTATIONS, key=str)


def _floating_output(node: Node) -> bool:
    """Only floating-point results are quantized (not e.g. BN's ``num_batches_tracked += 1``)."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return all(v.dtype.is_floating_point for v in vals if isinstance(v, torch.Tensor))
