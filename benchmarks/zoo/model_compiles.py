"""Model-level compiles that several tests check different things of: the MLPerf Tiny models
on a target, the recurrent models (the GRU keyword spotter among them) on imxrt700 and the
keyword spotter on an Ethos-U target, each compiled once per test process. Tests sharing one
mark it ``same_compile(...)`` so pytest-xdist runs them in one worker (``--dist loadgroup``)."""

from __future__ import annotations

import functools

import torch
import torch.nn as nn

import mcu_npu
from mcu_npu.models.mlperf_tiny import MODELS as MLPERF

MLPERF_COMPILERS = {"imxrt700": "reference", "corstone-300": "auto", "corstone-320": "auto"}


@functools.lru_cache(maxsize=None)
def mlperf(name: str, target: str):
    """(model, compiled program, 12 held-out input tuples) of MLPerf Tiny model ``name`` on
    ``target``, calibrated on ``mlperf_calibration(name)``."""
    torch.manual_seed(0)
    model, inputs = MLPERF[name]()
    calibration, tests = _mlperf_samples(inputs)
    prog = mcu_npu.compile(model, inputs, target=target, calibration=calibration,
                           npu_compiler=MLPERF_COMPILERS[target])
    return model, prog, tests


def mlperf_calibration(name: str) -> list[tuple]:
    """The 16 random input tuples ``mlperf(name, ...)`` calibrates on."""
    torch.manual_seed(0)
    return _mlperf_samples(MLPERF[name]()[1])[0]


def _mlperf_samples(inputs) -> tuple[list, list]:
    """(16 calibration tuples, 12 held-out tuples) shaped as ``inputs``."""
    g = torch.Generator().manual_seed(0)
    calibration = [tuple(torch.randn(x.shape, generator=g) for x in inputs) for _ in range(16)]
    tests = [tuple(torch.randn(x.shape, generator=g) for x in inputs) for _ in range(12)]
    return calibration, tests


class KeywordSpotter(nn.Module):
    """Conv1d 40->64 over [1, 49, 40] MFCC frames, a 2-layer GRU 64->64, Linear 64->12."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(40, 64, 3, padding=1)
        self.gru = nn.GRU(64, 64, num_layers=2, batch_first=True)
        self.fc = nn.Linear(64, 12)

    def forward(self, x):
        y = torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)
        out, _ = self.gru(y)
        return self.fc(out[:, -1])


class Recurrent(nn.Module):
    """One recurrent layer (GRU, RNN or LSTM) and a linear head on the last step."""

    def __init__(self, layer: nn.Module, features: int, classes: int = 4):
        super().__init__()
        self.layer = layer
        self.fc = nn.Linear(features, classes)

    def forward(self, x):
        out = self.layer(x)[0]
        return self.fc(out[:, -1])


RECURRENT = {
    "kws_gru2": (KeywordSpotter, (1, 49, 40)),
    "bigru": (lambda: Recurrent(nn.GRU(16, 32, batch_first=True, bidirectional=True), 64),
              (1, 20, 16)),
    "rnn_tanh2": (lambda: Recurrent(nn.RNN(12, 24, num_layers=2, batch_first=True), 24),
                  (1, 16, 12)),
    "rnn_relu": (lambda: Recurrent(nn.RNN(12, 24, nonlinearity="relu", batch_first=True), 24),
                 (1, 12, 12)),
    "lstm": (lambda: Recurrent(nn.LSTM(12, 24, batch_first=True), 24), (1, 16, 12)),
}


@functools.lru_cache(maxsize=None)
def recurrent(name: str):
    """(model, compiled program for imxrt700, 4 held-out inputs) of recurrent model ``name``,
    calibrated on 16 random inputs."""
    factory, shape = RECURRENT[name]
    torch.manual_seed(0)
    model = factory().eval()
    g = torch.Generator().manual_seed(1)
    calibration = [(torch.randn(shape, generator=g),) for _ in range(16)]
    prog = mcu_npu.compile(model, calibration[0], calibration=calibration,
                           npu_compiler="reference")
    tests = [torch.randn(shape, generator=g) for _ in range(4)]
    return model, prog, tests


KWS_PRECISIONS = {"int8": None, "int16-state": {"overrides": {"gru": "int16", "fc": "int16"}}}


@functools.lru_cache(maxsize=None)
def keyword_spotter(target: str, precision: str = "int8"):
    """(model, compiled program, 8 held-out inputs) of the GRU keyword spotter on ``target``,
    calibrated on 64 random inputs (with 16, clipping at ranges the calibration never saw
    hides what int16 gains); ``precision``: a key of ``KWS_PRECISIONS`` ("int16-state": the
    GRU layers and the classifier reading their state in int16)."""
    torch.manual_seed(0)
    model = KeywordSpotter().eval()
    g = torch.Generator().manual_seed(1)
    calibration = [(torch.randn(1, 49, 40, generator=g),) for _ in range(64)]
    prog = mcu_npu.compile(model, calibration[0], target=target, calibration=calibration,
                           precision=KWS_PRECISIONS[precision])
    tests = [torch.randn(1, 49, 40, generator=g) for _ in range(8)]
    return model, prog, tests


def same_compile(*key: str):
    """The pytest mark that sends every test using one of these compiles to one worker."""
    import pytest

    return pytest.mark.xdist_group("compile-" + "-".join(key))
