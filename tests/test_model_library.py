"""Models nobody here wrote compile, load in ExecuTorch's runtime and hold the numerics
contract on the three SoC targets: a representative set of public model-library
architectures (``zoo.public``: random weights with settled BatchNorm statistics, 96x96
input, 8 calibration samples), the contract measured over all outputs of 8 held-out inputs.
On corstone-320 (Ethos-U85) the transformer and ConvNeXt families run every compute op on
the NPU in one partition. ``benchmarks/model_library.py`` runs the long list."""

from __future__ import annotations


import pytest

from zoo import public
from helpers import assert_loads_in_executorch, sqnr_holds
from mcu_npu.report import Kernel


# name -> the targets it runs wholly on the NPU, in one partition. Squeeze-excite and
# hard-swish (MobileNetV3), ConvNeXt, and transformers:
# class token (ViT), attention-bias tables and a distilled head (LeViT), conv and attention
# with resizes (MobileViT). On imxrt700 hard-swish stays on the Cortex-M (no Neutron
# operator) and GELU runs approximated only where the measurement allows
# (``flow.approximate``), so no imxrt700 expectation is made here.
MODELS = public.TEST_SET


@pytest.mark.slow
@pytest.mark.parametrize("name,target", [
    pytest.param(name, target, marks=public.same_compile(name, target))
    for name in MODELS for target in public.targets_of(name)])
def test_compiles_loads_and_holds_the_contract(name, target):
    model, prog, tests, figures = public.compiled(name, target)
    report, summary = prog.report, prog.report.summary
    assert summary["ops_on_npu"] > 0, report
    for op in report.ops:  # every CPU op says why
        assert op.kernel is Kernel.NPU or op.reason, op
    if target in MODELS[name]:
        cpu = [(o.node, o.op, o.reason) for o in report.ops if o.kernel is not Kernel.NPU]
        assert not cpu and summary["partitions"] == 1, (summary["partitions"], cpu[:5])
    assert figures["finite"]
    assert sqnr_holds(figures["host_sqnr"], figures["ref_sqnr"]), figures
    out = prog.run(*tests[0])
    assert_loads_in_executorch(prog.buffer, tests[0], [o.detach() for o in out])
