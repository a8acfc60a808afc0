"""Accuracy measures used by the report, tests and benchmarks."""

from __future__ import annotations

import torch


def sqnr_db(reference: torch.Tensor, test: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio of ``test`` against ``reference``, in dB."""
    ref = torch.as_tensor(reference).detach().double().flatten()
    err = ref - torch.as_tensor(test).detach().double().flatten()
    noise = err.pow(2).sum()
    if noise == 0:
        return float("inf")
    return float(10 * torch.log10(ref.pow(2).sum().clamp_min(1e-30) / noise))
