"""Small model factories for the compare and sweep tests (``tests/test_compare_sweep.py``):
each returns ``(model, example_inputs, calibration)``, the same every call (fixed seeds), so
a compile in any process gives the same program. torch is imported inside the factories,
so a worker running ``broken`` or ``crash`` starts in a moment."""

from __future__ import annotations

CALIBRATION = 8


def _samples(shape, seed: int) -> list[tuple]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(shape, generator=g),) for _ in range(CALIBRATION)]


def tiny_cnn():
    """Conv, ReLU, conv, global average pool, linear: a 4-class image classifier."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).eval()
    samples = _samples((1, 3, 16, 16), 1)
    return model, samples[0], samples


def tiny_mlp():
    """Two linear layers with a tanh between: a 3-class classifier of 32 features."""
    import torch
    from torch import nn

    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 3)).eval()
    samples = _samples((1, 32), 2)
    return model, samples[0], samples


def broken():
    """A factory that fails: its row carries the error."""
    raise RuntimeError("this factory cannot build its model")


def crash():
    """A factory whose process dies (as a crash in a native library would end it)."""
    import os

    os._exit(3)


def hang():
    """A factory that never returns (a compile that hangs): only a timeout ends its cell."""
    import time

    while True:
        time.sleep(60)
