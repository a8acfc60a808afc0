"""Every converter operator: quantize a one-op module, convert it, run it in LiteRT and
compare with the quantized reference (the converted PT2E program run in PyTorch).
Tolerance: one output quantization step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import convert_module, output_step, run_tflite
from zoo.op_cases import CASES


@pytest.mark.parametrize("name,factory,shapes", CASES, ids=[c[0] for c in CASES])
def test_operator_matches_quantized_reference(name, factory, shapes):
    torch.manual_seed(0)
    module = factory().eval()
    inputs = tuple(torch.randn(s) for s in shapes)
    reference, model, edge = convert_module(module, inputs)
    expected = reference(*inputs)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    got = run_tflite(model, inputs)
    steps = output_step(edge)
    assert len(got) == len(expected)
    for e, g, step in zip(expected, got, steps):
        assert g.shape == tuple(e.shape)
        diff = np.abs(g - e.detach().numpy()).max() / step
        assert diff <= 1.0 + 1e-3, f"{name}: {diff:.2f} output steps off"
