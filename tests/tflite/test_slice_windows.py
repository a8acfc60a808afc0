"""A slice read only by slices emits no operator: its readers slice the original tensor."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import convert_module, output_step, run_tflite
from mcu_npu.tflite.describe import op_names


class Fn(torch.nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, *xs):
        return self.f(*xs)


def _steps(x):
    """An unrolled-recurrence read: cut the channels once, then one step at a time."""
    a, b = x[..., :6], x[..., 6:]
    return a[:, 1] * 1.5 + a[:, 3], b[:, 0] - b[:, 2]


CASES = [
    ("channels_then_steps", _steps, (1, 4, 9), 4),
    ("nested_windows", lambda x: x[:, 1:5][:, 1:3][:, :, 2:7] + 1.0, (2, 6, 8), 1),
    ("slice_also_read_whole", lambda x: (x[:, 2:6], x[:, 2:6][:, 1]), (3, 8, 2), None),
]


@pytest.mark.parametrize("name,f,shape,slices", CASES, ids=[c[0] for c in CASES])
def test_windows_match_quantized_reference(name, f, shape, slices):
    torch.manual_seed(0)
    x = torch.randn(shape)
    reference, model, edge = convert_module(Fn(f), (x,))
    expected = reference(x)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    got = run_tflite(model, (x,))
    for e, g, step in zip(expected, got, output_step(edge)):
        assert g.shape == tuple(e.shape)
        assert np.abs(g - e.detach().numpy()).max() / step <= 1.0 + 1e-3
    if slices is not None:  # one STRIDED_SLICE per read, none for the windows themselves
        assert op_names(model.buffer).count("STRIDED_SLICE") == slices
