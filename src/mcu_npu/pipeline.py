"""The compile flow's steps, shared by the API, the recipes, tests and benchmarks:
export -> quantize -> Edge. Each step is a plain function over ExecuTorch objects."""

from __future__ import annotations

from typing import Iterable

import torch
from executorch.exir import EdgeCompileConfig, EdgeProgramManager, to_edge
from torch.fx import GraphModule

from .errors import UnsupportedModelError
from .quantization import NeutronQuantizer, quantize
from .tflite.registry import PRESERVED_ATEN_OPS


def edge_compile_config() -> EdgeCompileConfig:
    """Quantized graphs carry ops outside the core ATen set; the converter checks them."""
    return EdgeCompileConfig(_check_ir_validity=False, preserve_ops=list(PRESERVED_ATEN_OPS))


def default_aten_passes(target) -> list:
    """ATen rewrites a target applies before quantization, in order: recurrent layers become
    single-layer, then elementary ops every NPU converts."""
    from .passes import DecomposeGRU, DecomposeLSTM, DecomposeRNN, SplitGRUByLayers

    return [SplitGRUByLayers(), DecomposeGRU(), DecomposeRNN(), DecomposeLSTM()]


def export_module(model: torch.nn.Module, example_inputs: tuple) -> GraphModule:
    """torch.export a module into a plain ATen GraphModule, with export's message on failure."""
    example_inputs = tuple(x.contiguous() if isinstance(x, torch.Tensor) else x
                           for x in example_inputs)  # odd strides would read as channels-last
    try:
        ep = torch.export.export(model.eval(), example_inputs)
    except Exception as exc:  # torch raises many types; the message is what matters
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsupportedModelError(f"torch.export could not capture the model: {first}") from exc
    return ep.module(check_guards=False)


def quantized_edge(
    model: torch.nn.Module | GraphModule,
    example_inputs: tuple,
    calibration: Iterable[tuple] | None = None,
    quantizer=None,
) -> tuple[GraphModule, EdgeProgramManager]:
    """(quantized reference module, its Edge program) for ``model``."""
    if not isinstance(model, GraphModule):
        model = export_module(model, example_inputs)
    reference = quantize(model, example_inputs, calibration, quantizer or NeutronQuantizer())
    ep = torch.export.export(reference, tuple(example_inputs))
    return reference, to_edge(ep, compile_config=edge_compile_config())
