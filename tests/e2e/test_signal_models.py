"""Biosignal and speech model shapes run wholly on the Ethos-U85 (corstone-320), in one
partition, within the numerics contract over all outputs of 8 held-out inputs:

- an EEGNet-like temporal conv net: a montage (channels picked by a constant index), a wide
  temporal (1, 32) convolution, depthwise spatial filter, BatchNorm, ELU, (1, 4) average
  pooling, dropout, separable convolution, a linear head;
- a gated temporal block: a reflect-padded input convolution, a conditioning vector repeated
  over channels, dilated conv1d, tanh(x) * sigmoid(x) gate, residual, skips concatenated,
  GELU, a GLU, and log-probabilities per time step (log_softmax, as a CTC head);
- an inception-style 1-D net: parallel Conv1d with kernels 64, 32 and 16 and 'same' padding
  (even kernels: one more pad after than before), cat, temporal mean, linear;
- a 1-D U-Net over a 2 x 960 signal: strided convolutions down, a transposed convolution
  and a nearest upsampling up, skips concatenated.

The models are ``mcu_npu.models.signal``'s: random weights, settled BatchNorm statistics."""

from __future__ import annotations

import pytest
import torch

import mcu_npu
from helpers import sqnr_holds
from mcu_npu.models.signal import SIGNAL_MODELS
from zoo.public import measure


@pytest.mark.slow
@pytest.mark.parametrize("name", SIGNAL_MODELS)
def test_signal_model_runs_in_one_npu_partition_within_contract(name):
    model, example = SIGNAL_MODELS[name]()
    g = torch.Generator().manual_seed(2)
    calibration = [example] + [tuple(torch.randn(x.shape, generator=g) for x in example)
                               for _ in range(7)]
    tests = [tuple(torch.randn(x.shape, generator=g) for x in example) for _ in range(8)]
    prog = mcu_npu.compile(model, example, target="corstone-320", calibration=calibration)
    s = prog.report.summary
    cpu = [(o.node, o.op, o.reason) for o in prog.report.ops if o.kernel.name != "NPU"]
    assert not cpu and s["partitions"] == 1, (s["partitions"], cpu)
    figures = measure(prog, model, tests)
    assert figures["finite"] and sqnr_holds(figures["host_sqnr"], figures["ref_sqnr"]), figures
