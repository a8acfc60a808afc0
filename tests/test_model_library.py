"""Models nobody here wrote compile, load in ExecuTorch's runtime and hold the numerics
contract on the three SoC targets: a representative set of public model-library
architectures (``model_library``: random weights with settled BatchNorm statistics, 96x96
input, 8 calibration samples), the contract measured over all outputs of 8 held-out inputs.
``benchmarks/model_library.py`` runs the long list."""

from __future__ import annotations

import warnings

import pytest
import torch

import model_library
from helpers import assert_loads_in_executorch
from mcu_npu.report import Kernel

TARGETS = ["imxrt700", "corstone-300", "corstone-320"]

# convnets with squeeze-excite and hard-swish, re-parameterisable branches, ConvNeXt-style,
# and transformer families (class-token ViT, attention-bias LeViT, conv/attention MobileViT)
MODELS = ["mobilenetv3_small_050", "repvgg_a0", "convnext_atto", "vit_tiny_patch16_224",
          "levit_128s", "mobilevit_xxs"]


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", MODELS)
def test_compiles_loads_and_holds_the_contract(name, target):
    import mcu_npu

    model, example, calibration, tests = model_library.build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # imxrt700's reference-compiler warning
        prog = mcu_npu.compile(model, example, target=target, calibration=calibration)
    summary = prog.report.summary
    assert summary["ops_on_npu"] > 0, prog.report
    for op in prog.report.ops:  # every CPU op says why
        assert op.kernel is Kernel.NPU or op.reason, op
    figures = model_library.measure(prog, model, tests)
    assert figures["finite"]
    assert figures["host_sqnr"] >= figures["ref_sqnr"] - 1.0, figures
    out = prog.run(*tests[0])
    assert_loads_in_executorch(prog.buffer, tests[0], [o.detach() for o in out])
