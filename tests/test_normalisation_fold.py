"""A declared input's normalisation folds into the first convolution where that is exact
(``passes.aten.FoldInputNormalisation``): one integer mean with a std per channel (the mean
goes into the input's quantization, the 1/std into the weights, whatever the padding), or
any per-channel affine before an unpadded convolution. Where the first convolution pads
and the means differ per channel, folding would change the border and the 1x1 layer stays.

The expected answers are the float model fed ``(x - mean) / std`` in channels-first order,
computed here; host and ExecuTorch runtime agree bit for bit (``conftest``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import mcu_npu
from helpers import sqnr_holds
from mcu_npu import InputSpec
from mcu_npu.estimate.metrics import sqnr_db
from test_program_inputs import MEAN, STD, ImageNet, pixels

TARGETS = ("imxrt700", "corstone-300")


def _unpadded() -> nn.Module:
    model = ImageNet()
    model.c1.padding = (0, 0)
    return model


CASES = {  # model, declared mean, folds
    "one integer mean, padded conv": (ImageNet, (128.0,), True),
    "per-channel mean, unpadded conv": (_unpadded, MEAN, True),
    "per-channel mean, padded conv": (ImageNet, MEAN, False),
}


def test_one_integer_mean_with_per_channel_std_folds_its_mean_into_the_quantization():
    spec = InputSpec(dtype="uint8", mean=(128.0,), std=STD)
    assert spec.mean_folds and not spec.folds
    assert spec.quantization_affine() == (128.0, 1.0)
    assert spec.normalised_range() == (-128.0, 127.0)
    assert not InputSpec(dtype="uint8", mean=MEAN, std=STD).mean_folds
    assert not InputSpec(dtype="uint8", mean=(127.5,), std=STD).mean_folds
    assert not InputSpec(dtype="int16", mean=(128.0,), std=STD).mean_folds


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", list(CASES))
def test_normalisation_folds_into_the_first_convolution_where_exact(case, target):
    net, mean, folds = CASES[case]
    torch.manual_seed(0)
    model = net().eval()
    spec = InputSpec(dtype="uint8", layout="channels_last", mean=mean, std=STD)
    # 32 held-out images: the model gives 5 values per image, and the SQNR of fewer
    # values swings with single-step output differences
    calibration, held_out = pixels(16, seed=1), pixels(32, seed=2)
    prog = mcu_npu.compile(model, calibration[0], target=target, calibration=calibration,
                           inputs=spec, progress=False)
    convs = [o.op for o in prog.report.ops].count("aten.convolution")
    assert convs == (2 if folds else 3), [o.op for o in prog.report.ops]
    shift = 128.0 if spec.mean_folds else 0.0
    record = prog.report.summary["io"]["inputs"][0]
    assert (record["dtype"], record["scale"], record["zero_point"]) == ("uint8", 1.0, shift)
    m = torch.tensor(mean * (3 // len(mean))).reshape(1, 3, 1, 1)
    s = torch.tensor(STD).reshape(1, 3, 1, 1)
    with torch.no_grad():
        want = torch.cat([model(((x.permute(0, 3, 1, 2).double() - m) / s).float())
                          for (x,) in held_out])
        # the quantized reference takes what the front takes: the pixels less the folded mean
        ref = torch.cat([prog.reference((x.double() - shift).float())[0] for (x,) in held_out])
    got = torch.cat([prog.run(x)[0] for (x,) in held_out])  # conftest: == ExecuTorch's run
    host, reference = sqnr_db(want, got), sqnr_db(want, ref)
    assert reference > 25, reference
    assert sqnr_holds(host, reference), (host, reference)
