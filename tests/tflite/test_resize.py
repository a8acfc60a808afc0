"""Resizing (``F.interpolate``): RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR with the flags that
give PyTorch's source coordinates. Each case is converted alone and run in LiteRT against the
quantized reference, which is PyTorch's own interpolation of the int8 input (a wrong
align_corners / half_pixel_centers moves samples by a quarter pixel or more: many steps
off); Vela places the 1x / 2x / 4x / 8x ones on the U55 and the U85; the checks refuse, with
their reasons, what TFLite or an NPU cannot express; through the whole flow the resize runs
on the NPU of each target."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mcu_npu
from helpers import (ConvResize, Resize, as_list, calibration_set, convert_module, output_step,
                     quantized_edge, reference_output_steps, run_tflite)
from mcu_npu.npu.ethos_u.vela_support import vela_rejections
from mcu_npu.targets import get_target
from mcu_npu.tflite.describe import describe
from mcu_npu.tflite.registry import lookup


# (id, interpolate arguments, input shape, TFLite op and flags, Vela places it)
CASES = [
    ("bilinear_x2", dict(scale_factor=2, mode="bilinear"), (1, 4, 5, 6),
     "RESIZE_BILINEAR(half_pixel_centers)", True),
    ("bilinear_x2_align_corners", dict(size=(9, 11), mode="bilinear", align_corners=True),
     (1, 4, 5, 6), "RESIZE_BILINEAR(align_corners)", True),
    ("bilinear_size_x2", dict(size=(8, 12), mode="bilinear"), (1, 3, 4, 6),
     "RESIZE_BILINEAR(half_pixel_centers)", True),
    ("bilinear_x2_batch2", dict(scale_factor=2, mode="bilinear"), (2, 3, 4, 6),
     "RESIZE_BILINEAR(half_pixel_centers)", False),
    ("bilinear_x4", dict(scale_factor=4, mode="bilinear"), (1, 3, 3, 4),
     "RESIZE_BILINEAR(half_pixel_centers)", False),
    ("bilinear_x3_align_corners", dict(scale_factor=3, mode="bilinear", align_corners=True),
     (1, 3, 4, 4), "RESIZE_BILINEAR(align_corners)", False),
    ("bilinear_to_7x9", dict(size=(7, 9), mode="bilinear"), (1, 3, 5, 5),
     "RESIZE_BILINEAR(half_pixel_centers)", False),
    ("nearest_x2", dict(scale_factor=2, mode="nearest"), (1, 5, 4, 7),
     "RESIZE_NEAREST_NEIGHBOR()", True),
    ("nearest_x4", dict(scale_factor=4, mode="nearest"), (1, 3, 3, 2),
     "RESIZE_NEAREST_NEIGHBOR()", True),
    ("nearest_to_7x9", dict(size=(7, 9), mode="nearest"), (1, 3, 5, 4),
     "RESIZE_NEAREST_NEIGHBOR()", False),
    ("nearest_exact_x2", dict(scale_factor=2, mode="nearest-exact"), (1, 4, 3, 5),
     "RESIZE_NEAREST_NEIGHBOR(half_pixel_centers)", True),
    ("nearest_exact_to_7x9", dict(size=(7, 9), mode="nearest-exact"), (1, 3, 5, 4),
     "RESIZE_NEAREST_NEIGHBOR(half_pixel_centers)", False),
]
IDS = [c[0] for c in CASES]
VELA_CASES = [c for c in CASES if c[2][0] == 1]
"""Vela fails on a resize of a batch of several rather than leaving it to the CPU: the
checks refuse those (``test_checks_accept_on_ethos_u_what_vela_places``)."""
U55, U85 = get_target("ethos-u55-128"), get_target("ethos-u85-256")


def _flags(model) -> str:
    """The resize op of ``model`` and the flags it sets, e.g. ``RESIZE_BILINEAR(align_corners)``."""
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromPackedBuf(model.buffer, 0)
    (op,) = [o for o in m.subgraphs[0].operators
             if m.operatorCodes[o.opcodeIndex].builtinCode in (
                 schema.BuiltinOperator.RESIZE_BILINEAR,
                 schema.BuiltinOperator.RESIZE_NEAREST_NEIGHBOR)]
    code = m.operatorCodes[op.opcodeIndex].builtinCode
    name = "RESIZE_BILINEAR" if code == schema.BuiltinOperator.RESIZE_BILINEAR \
        else "RESIZE_NEAREST_NEIGHBOR"
    flags = [f for f, on in (("align_corners", op.builtinOptions.alignCorners),
                             ("half_pixel_centers", op.builtinOptions.halfPixelCenters)) if on]
    return f"{name}({','.join(flags)})"


@pytest.fixture(scope="module")
def converted():
    found = {}
    for name, kwargs, shape, _, _ in CASES:
        torch.manual_seed(0)
        inputs = (torch.randn(shape),)
        found[name] = (inputs, *convert_module(Resize(**kwargs).eval(), inputs))
    return found


@pytest.mark.parametrize("name,kwargs,shape,op,on_vela", CASES, ids=IDS)
def test_resize_matches_pytorch_interpolation_within_one_step(converted, name, kwargs, shape,
                                                              op, on_vela):
    inputs, reference, model, edge = converted[name]
    assert _flags(model) == op
    (want,), (got,), (step,) = [reference(*inputs)], run_tflite(model, inputs), output_step(edge)
    assert got.shape == tuple(want.shape)
    assert np.abs(got - want.detach().numpy()).max() / step <= 1.0 + 1e-3, describe(model.buffer)


@pytest.mark.parametrize("name,kwargs,shape,op,on_vela", VELA_CASES,
                         ids=[c[0] for c in VELA_CASES])
def test_vela_places_the_resizes_it_supports(converted, name, kwargs, shape, op, on_vela):
    """What the checks accept on Ethos-U, Vela places on the U55 and the U85; the U55 refuses
    the rest (the U85's compiler takes some of those, e.g. nearest to any size: the checks
    keep to what both take)."""
    model = converted[name][2]
    assert (vela_rejections(model, U55) == {}) == on_vela, describe(model.buffer)
    if on_vela:
        assert vela_rejections(model, U85) == {}, describe(model.buffer)


def _resize_node(kwargs, shape):
    x = torch.randn(shape)
    _, edge = quantized_edge(Resize(**kwargs).eval(), (x,))
    (node,) = [n for n in edge.exported_program().graph.nodes
               if n.op == "call_function" and "upsample" in str(n.target)]
    return node


@pytest.mark.parametrize("name,kwargs,shape,op,on_vela", CASES, ids=IDS)
def test_checks_accept_on_ethos_u_what_vela_places(name, kwargs, shape, op, on_vela):
    node = _resize_node(kwargs, shape)
    entry = lookup(node.target)
    assert entry.rejection(node) is None
    for target in ("corstone-300", "corstone-320"):
        assert (entry.rejection(node, get_target(target)) is None) == on_vela, target


def test_checks_state_the_limits():
    on = get_target("imxrt700"), get_target("corstone-320")
    x4 = _resize_node(dict(scale_factor=4, mode="bilinear"), (1, 3, 3, 4))
    assert lookup(x4.target).rejection(x4, on[0]) is None  # Neutron takes 4x half-pixel
    assert "only by 2" in lookup(x4.target).rejection(x4, on[1])
    odd = _resize_node(dict(size=(7, 9), mode="nearest"), (1, 3, 5, 4))
    for target in on:
        assert "by 1, 2, 4 or 8" in lookup(odd.target).rejection(odd, target)
    uneven = _resize_node(dict(scale_factor=(2, 4), mode="nearest"), (1, 3, 4, 4))
    assert lookup(uneven.target).rejection(uneven, on[0]) is None
    assert "by the same" in lookup(uneven.target).rejection(uneven, on[1])
    inexact = _resize_node(dict(scale_factor=1.5, mode="bilinear"), (1, 3, 5, 5))
    assert "scale_factor must give the output size" in lookup(inexact.target).rejection(inexact)


@pytest.mark.parametrize("target", ["imxrt700", "corstone-300", "corstone-320"])
@pytest.mark.parametrize("kwargs", [dict(scale_factor=2, mode="bilinear"),
                                    dict(size=(15, 15), mode="bilinear", align_corners=True),
                                    dict(scale_factor=2, mode="nearest")],
                         ids=["bilinear", "bilinear_align_corners", "nearest"])
def test_resize_runs_on_the_npu_within_one_step(kwargs, target):
    torch.manual_seed(0)
    module = ConvResize(**kwargs).eval()
    x = torch.randn(1, 3, 8, 8)
    cal = calibration_set((x,))
    prog = mcu_npu.compile(module, (x,), target=target, calibration=cal)
    placements = {o.op: o.placement for o in prog.report.ops}
    resize = [op for op in placements if "upsample" in op]
    assert resize and all(placements[op].startswith("NPU partition") for op in resize), \
        prog.report
    assert prog.report.summary["partitions"] == 1, prog.report
    for sample in cal:
        for e, g, step in zip(as_list(prog.reference(*sample)), prog.run(*sample),
                              reference_output_steps(prog.reference)):
            assert g.shape == e.shape
            assert float((g - e).abs().max()) / step <= 1.0 + 1e-3
