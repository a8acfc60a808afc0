"""Shared test helpers: quantize -> convert -> run in LiteRT, and error measures."""

from __future__ import annotations

import numpy as np
import torch

from mcu_npu.metrics import sqnr_db  # noqa: F401  (re-exported for tests)
from mcu_npu.pipeline import quantized_edge
from mcu_npu.runtime.litert import run_model
from mcu_npu.tflite import convert


def run_tflite(model, inputs) -> list[np.ndarray]:
    """Run a converted TFLiteModel on PyTorch inputs; outputs back in PyTorch layout."""
    return run_model(model, inputs)


def calibration_set(example_inputs, n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(x.shape, generator=g) * 1.0 for x in example_inputs)
            for _ in range(n)]


def convert_module(module, example_inputs, calibration=None):
    """(quantized reference, TFLiteModel, edge program) for a float module."""
    module = module.eval()
    calibration = calibration if calibration is not None else calibration_set(example_inputs)
    reference, edge = quantized_edge(module, example_inputs, calibration)
    return reference, convert(edge.exported_program()), edge


def output_step(edge) -> list[float]:
    """The output quantization step of each graph output (from its final dequantize)."""
    out = [n for n in edge.exported_program().graph.nodes if n.op == "output"][0]
    return [float(a.args[1]) for a in out.args[0]]


def reference_output_steps(reference) -> list[float]:
    """Output quantization steps of a quantized reference GraphModule (its final dequantizes)."""
    out = [n for n in reference.graph.nodes if n.op == "output"][0]
    args = out.args[0]
    args = args if isinstance(args, (list, tuple)) else [args]
    return [float(a.args[1]) for a in args]


def as_list(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def fit(model, x, y, optimizer, epochs: int, batch: int) -> None:
    """Cross-entropy training over shuffled mini-batches (seeded order, last partial batch
    dropped)."""
    g = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=g)
        for i in range(0, len(x) - batch + 1, batch):
            idx = order[i:i + batch]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()
