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


def flat_outputs(out) -> list[torch.Tensor]:
    """Every tensor of a (nested) model output, flattened to float64, in order: whole-model
    figures are measured over all outputs together."""
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flat_outputs(o)]
    return [torch.as_tensor(out).detach().flatten().double()]
