"""ConvertResizeToLinear: exact in float for bilinear (with and without align_corners) and
nearest resizes by any factor; leaves what the target's NPU resizes and large maps; through
the whole flow MobileViT's 3 x 3 -> 4 x 4 -> 3 x 3 resizes run on the NPU of each target
within one output step of the quantized reference."""

from __future__ import annotations

import pytest
import torch

import mcu_npu
from helpers import ConvResize, Resize, as_list, calibration_set, reference_output_steps
from mcu_npu.passes.aten import ConvertResizeToLinear
from mcu_npu.flow.export import export_module
from mcu_npu.targets import get_target

aten = torch.ops.aten
TARGETS = ["imxrt700", "corstone-300", "corstone-320"]


def calls(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kwargs,shape", [
    (dict(size=(4, 4), mode="bilinear"), (1, 5, 3, 3)),
    (dict(size=(3, 3), mode="bilinear"), (1, 5, 4, 4)),
    (dict(size=(5, 6), mode="bilinear", align_corners=True), (2, 3, 4, 4)),
    (dict(scale_factor=1.5, mode="nearest"), (2, 3, 4, 4)),
    (dict(size=(5, 3), mode="nearest-exact"), (1, 2, 3, 4)),
], ids=["bilinear_3_to_4", "bilinear_4_to_3", "bilinear_align_corners", "nearest_x1.5",
        "nearest_exact"])
def test_is_exact_and_leaves_one_linear(kwargs, shape, target):
    module = Resize(**kwargs).eval()
    x = torch.randn(shape)
    result = ConvertResizeToLinear(get_target(target))(export_module(module, (x,)))
    assert result.modified
    assert calls(result.graph_module) == [aten.view.default, aten.linear.default,
                                          aten.view.default]
    with torch.no_grad():
        torch.testing.assert_close(result.graph_module(x), module(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kwargs,shape", [
    (dict(scale_factor=2, mode="bilinear"), (1, 3, 4, 4)),  # the NPU resizes it
    (dict(scale_factor=2, mode="nearest"), (1, 3, 5, 5)),
    (dict(size=(48, 48), mode="bilinear"), (1, 3, 32, 32)),  # a 2304 x 1024 matrix
], ids=["bilinear_x2", "nearest_x2", "large_map"])
def test_leaves_npu_resizes_and_large_maps(kwargs, shape, target):
    gm = export_module(Resize(**kwargs).eval(), (torch.randn(shape),))
    assert not ConvertResizeToLinear(get_target(target))(gm).modified


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("size,shape", [((4, 4), (1, 3, 3, 3)), ((3, 3), (1, 3, 4, 4))],
                         ids=["3_to_4", "4_to_3"])
def test_small_resize_runs_on_the_npu_within_one_step(size, shape, target):
    torch.manual_seed(0)
    module = ConvResize(size=size, mode="bilinear").eval()
    x = torch.randn(shape)
    cal = calibration_set((x,))
    prog = mcu_npu.compile(module, (x,), target=target, calibration=cal)
    ops = {o.node: (o.op, o.placement) for o in prog.report.ops}
    assert "aten.linear" in {op for op, _ in ops.values()}, prog.report
    assert all(p.startswith("NPU partition") for _, p in ops.values()), prog.report
    assert prog.report.summary["partitions"] == 1, prog.report
    for sample in cal:
        for e, g, step in zip(as_list(prog.reference(*sample)), prog.run(*sample),
                              reference_output_steps(prog.reference)):
            assert g.shape == e.shape
            assert float((g - e).abs().max()) / step <= 1.0 + 1e-3
