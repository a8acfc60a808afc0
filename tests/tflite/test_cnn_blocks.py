"""The CNN building blocks of MobileNetV3- / EfficientNet- / SqueezeNet-style networks on the
NPU: SiLU, squeeze-excitation (mean over H, W and the broadcast gate mul), ceil-mode and
unbatched pooling, 1-D transposed convolution.

Each row is converted alone, run in LiteRT against the quantized reference (at most one
output step) and offered to Vela for the U55 and the U85, which must place every operator
on the NPU. The whole networks then compile for the three SoC presets.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mcu_npu
from helpers import convert_module, output_step, quantized_edge, run_tflite, sqnr_db, \
    sqnr_holds
from mcu_npu.models.blocks import efficientnet_style, mobilenet_v3_style
from mcu_npu.npu.ethos_u.vela_support import vela_rejections
from mcu_npu.quantization.exact import run_exact
from mcu_npu.targets import get_target
from mcu_npu.tflite.describe import describe
from mcu_npu.tflite.ops.pooling import avg_padding_expressible
from mcu_npu.tflite.ops_aliases import aten


class Fn(nn.Module):
    def __init__(self, f, *modules):
        super().__init__()
        self.f = f
        self.mods = nn.ModuleList(modules)

    def forward(self, *xs):
        return self.f(self.mods, *xs)


class SqueezeExcite(nn.Module):
    """mean over H, W (keepdim) -> 1x1 conv -> SiLU -> 1x1 conv -> sigmoid -> x * gate."""

    def __init__(self, c=12, r=4):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(c, r, 1), nn.Conv2d(r, c, 1)

    def forward(self, x):
        w = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(w))))


def conv_then(f, cin=3, cout=8):
    """A conv first, so the op under test reads a channels-last NPU tensor."""
    return Fn(lambda m, x: f(m[0](x)), nn.Conv2d(cin, cout, 3))


# (id, module factory, input shapes)
CASES = [
    ("silu", lambda: nn.SiLU(), [(2, 5, 6, 7)]),
    ("silu_2d", lambda: nn.SiLU(), [(3, 17)]),
    ("silu_after_conv", lambda: conv_then(F.silu), [(1, 3, 9, 8)]),
    ("mean_hw_keepdim_nchw_input", lambda: Fn(lambda m, x: x.mean((2, 3), keepdim=True)),
     [(1, 6, 5, 7)]),
    ("mean_last_3d", lambda: Fn(lambda m, x: x.mean(-1)), [(3, 4, 9)]),
    ("squeeze_excite", lambda: SqueezeExcite(), [(1, 12, 6, 6)]),
    ("squeeze_excite_nchw_input_hardsigmoid",
     lambda: Fn(lambda m, x: x * F.hardsigmoid(m[0](x.mean((2, 3), keepdim=True))),
                nn.Conv2d(6, 6, 1)), [(1, 6, 5, 5)]),
    ("mul_broadcast_se", lambda: Fn(lambda m, x, g: x * g), [(1, 8, 5, 6), (1, 8, 1, 1)]),
    ("max_pool_ceil", lambda: conv_then(lambda y: F.max_pool2d(y, 3, 2, ceil_mode=True)),
     [(1, 3, 12, 12)]),
    ("max_pool_ceil_pad", lambda: Fn(lambda m, x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True)),
     [(1, 4, 10, 9)]),
    ("avg_pool_ceil", lambda: Fn(lambda m, x: F.avg_pool2d(x, 3, 2, ceil_mode=True)),
     [(1, 4, 10, 10)]),
    ("avg_pool_ceil_exclude_pad",
     lambda: Fn(lambda m, x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
     [(1, 4, 9, 9)]),
    ("max_pool_3d_input", lambda: Fn(lambda m, x: F.max_pool2d(x, 2)), [(3, 8, 6)]),
    ("avg_pool_3d_input", lambda: Fn(lambda m, x: F.avg_pool2d(x, 3, 1, 1)), [(4, 7, 5)]),
    ("adaptive_avg_pool_3d_input", lambda: nn.AdaptiveAvgPool2d(2), [(3, 6, 4)]),
    ("conv_transpose1d", lambda: nn.ConvTranspose1d(4, 6, 3, stride=2), [(1, 4, 10)]),
    ("conv_transpose1d_pad", lambda: nn.ConvTranspose1d(3, 5, 4, stride=2, padding=1),
     [(1, 3, 7)]),
    ("hardswish_4d", lambda: nn.Hardswish(), [(1, 6, 5, 7)]),
    ("gelu", lambda: nn.GELU(), [(2, 5, 6, 7)]),
    ("gelu_tanh", lambda: nn.GELU(approximate="tanh"), [(3, 17)]),
]

U55, U85 = get_target("ethos-u55-128"), get_target("ethos-u85-256")


@pytest.fixture(scope="module")
def converted():
    found = {}
    for name, factory, shapes in CASES:
        torch.manual_seed(0)
        inputs = tuple(torch.randn(s) for s in shapes)
        found[name] = (inputs, *convert_module(factory().eval(), inputs))
    return found


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_block_matches_quantized_reference(converted, name):
    inputs, reference, model, edge = converted[name]
    expected = reference(*inputs)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    got = run_tflite(model, inputs)
    assert len(got) == len(expected)
    for e, g, step in zip(expected, got, output_step(edge)):
        assert g.shape == tuple(e.shape)
        diff = np.abs(g - e.detach().numpy()).max() / step
        assert diff <= 1.0 + 1e-3, f"{name}: {diff:.2f} output steps off"


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_vela_places_every_operator_on_the_npu(converted, name):
    model = converted[name][2]
    assert vela_rejections(model, U55) == {}
    assert vela_rejections(model, U85) == {}


def test_silu_is_logistic_then_mul_on_fixed_sigmoid_parameters(converted):
    text = describe(converted["silu"][2].buffer)
    assert "LOGISTIC(" in text and "MUL(" in text
    assert "q(0.00390625,-128)" in text  # the gate: TFLite int8 LOGISTIC's fixed output


def test_mean_of_a_channels_first_tensor_reduces_a_width():
    """Reduced axes that are not height / width in memory are reduced as the width of a
    reshaped view of the same bytes: no depth reduction, no transpose."""
    lines = [ln for ln in describe(converted_mean().buffer).splitlines() if ln.startswith(("MEAN",
                                                                                   "TRANSPOSE"))]
    assert lines == ["MEAN(int8[1, 6, 35, 1] " + lines[0].split("] ", 1)[1]]


def converted_mean():
    torch.manual_seed(0)
    x = torch.randn(1, 6, 5, 7)
    return convert_module(Fn(lambda m, x: x.mean((2, 3), keepdim=True)), (x,))[1]


def test_avg_pool_counting_an_overhang_it_cannot_express_is_refused():
    """count_include_pad counts PyTorch's padding but never the ceil-mode overhang: neither
    explicit padding (counts both) nor SAME (counts neither) gives it."""
    torch.manual_seed(0)
    x = torch.randn(1, 2, 8, 8)
    _, edge = quantized_edge(
        Fn(lambda m, x: (F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), F.avg_pool2d(x, 2, 2))), (x,))
    pools = {n.args[1][0]: n for n in edge.exported_program().graph.nodes
             if n.op == "call_function" and n.target == aten.avg_pool2d.default}
    assert not avg_padding_expressible(pools[3]) and avg_padding_expressible(pools[2])


def test_gelu_is_refused_on_neutron_only(converted):
    """Vela runs TFLite GELU on the U55 and U85 (above); Neutron has no GELU."""
    from mcu_npu.tflite.registry import lookup

    edge = converted["gelu"][3].exported_program()
    (node,) = [n for n in edge.graph.nodes if n.target == aten.gelu.default]
    entry = lookup(aten.gelu.default)
    assert entry.rejection(node, get_target("corstone-300")) is None
    assert entry.rejection(node, get_target("corstone-320")) is None
    assert "no NPU conversion for aten.gelu" in entry.rejection(node, get_target("imxrt700"))


# --- whole networks ----------------------------------------------------------------------

NETWORKS = {"mobilenet_v3_style": mobilenet_v3_style, "efficientnet_style": efficientnet_style}


@pytest.mark.slow
@pytest.mark.parametrize("target", ["corstone-320", "corstone-300", "imxrt700"])
@pytest.mark.parametrize("name", list(NETWORKS))
def test_network_compiles_with_every_compute_op_on_the_npu(name, target):
    """Every compute op on the NPU in one partition, and the host run's SQNR against float
    within 1 dB of the quantized reference's on 16 held-out samples. 16x16 inputs keep the
    test short; the blocks are those of the 64x64 networks."""
    model, _ = NETWORKS[name]()
    g = torch.Generator().manual_seed(0)
    calibration = [(torch.randn(1, 3, 16, 16, generator=g),) for _ in range(2)]
    tests = [(torch.randn(1, 3, 16, 16, generator=g),) for _ in range(16)]
    prog = mcu_npu.compile(model, calibration[0], target=target, calibration=calibration)
    s = prog.report.summary
    assert s["ops_on_cpu"] == 0 and s["partitions"] == 1, prog.report
    with torch.no_grad():
        floats = torch.cat([model(*t).flatten() for t in tests])
        refs = torch.cat([run_exact(prog.reference, *t).flatten() for t in tests])
    runs = torch.cat([prog.run(*t)[0].flatten() for t in tests])
    assert sqnr_holds(sqnr_db(floats, runs), sqnr_db(floats, refs))


class ConvNeXtBlock(nn.Module):
    """ConvNeXt's block and downsampling as timm writes them: a channels-first LayerNorm
    (permute, layer_norm over the last axis, permute back), a 2x2 stride-2 conv, then the
    7x7 depthwise conv, the permute to channels last, LayerNorm, the MLP, the layer scale and
    the permute back before the residual add."""

    def __init__(self, c=8):
        super().__init__()
        self.down_norm, self.down = nn.LayerNorm(c), nn.Conv2d(c, c, 2, stride=2)
        self.dw, self.norm = nn.Conv2d(c, c, 7, padding=3, groups=c), nn.LayerNorm(c)
        self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        x = self.down(self.down_norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        y = self.fc2(F.gelu(self.fc1(y))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


@pytest.mark.parametrize("target", ["corstone-320", "corstone-300", "imxrt700"])
def test_convnext_block_runs_on_the_npu(target):
    """The means over the channels-last axis and every permute run on the NPU (Neutron has no
    GELU, which alone stays on the CPU there), and the host run's SQNR against float is within
    1 dB of the quantized reference's on 8 held-out samples."""
    torch.manual_seed(0)
    model = ConvNeXtBlock().eval()
    g = torch.Generator().manual_seed(0)
    calibration = [(torch.randn(1, 8, 12, 12, generator=g),) for _ in range(4)]
    tests = [(torch.randn(1, 8, 12, 12, generator=g),) for _ in range(8)]
    prog = mcu_npu.compile(model, calibration[0], target=target, calibration=calibration)
    ops = [(o.op, o.placement) for o in prog.report.ops]
    assert sum(op == "aten.mean.dim" for op, _ in ops) == 4, prog.report
    assert all(p.startswith("NPU partition") for op, p in ops
               if not (op == "aten.gelu" and target == "imxrt700")), prog.report
    with torch.no_grad():
        floats = torch.cat([model(*t).flatten() for t in tests])
        refs = torch.cat([run_exact(prog.reference, *t).flatten() for t in tests])
    runs = torch.cat([prog.run(*t)[0].flatten() for t in tests])
    assert sqnr_holds(sqnr_db(floats, runs), sqnr_db(floats, refs))
