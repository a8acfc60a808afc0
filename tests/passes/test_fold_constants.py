"""FoldConstants: what timm models compute from constants alone (a class token's expand, an
attention-bias table read through an index buffer, a mask built with bitwise_not, a
weight-standardised convolution) becomes a constant, exactly, within the size bound; through
the whole flow the ops around it run on the NPU and match the quantized reference."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mcu_npu
from zoo import public
from helpers import as_list, calibration_set, reference_output_steps, sqnr_holds
from mcu_npu.passes.aten import FoldConstants
from mcu_npu.passes.aten.fold_constants import MAX_ELEMENTS, MAX_GROWTH
from mcu_npu.flow.export import export_module

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed
TARGETS = ["imxrt700", "corstone-300", "corstone-320"]


class ClassToken(nn.Module):
    """A ViT's learned class token, expanded to the batch and put before the patch tokens."""

    def __init__(self, dim=16, patches=9):
        super().__init__()
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, patches + 1, dim) * 0.1)
        self.proj = nn.Linear(12, dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):  # x: (B, patches, 12)
        x = self.proj(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.fc(torch.relu(x))


class BiasTable(nn.Module):
    """LeViT's attention biases: a per-offset table read through a constant index buffer and
    added to the attention scores."""

    def __init__(self, heads=2, resolution=3, key_dim=4):
        super().__init__()
        points = list(itertools.product(range(resolution), range(resolution)))
        offsets, idxs = {}, []
        for p1, p2 in itertools.product(points, points):
            offset = (abs(p1[0] - p2[0]), abs(p1[1] - p2[1]))
            idxs.append(offsets.setdefault(offset, len(offsets)))
        self.attention_biases = nn.Parameter(torch.randn(heads, len(offsets)))
        self.register_buffer("attention_bias_idxs",
                             torch.tensor(idxs).view(len(points), len(points)), persistent=False)
        self.qk = nn.Linear(8, 2 * heads * key_dim)
        self.heads, self.key_dim = heads, key_dim

    def forward(self, x):  # x: (B, resolution**2, 8)
        b, n, _ = x.shape
        q, k = self.qk(x).view(b, n, 2, self.heads, self.key_dim).permute(2, 0, 3, 1, 4)
        attn = q @ k.transpose(-2, -1) * 0.5 + self.attention_biases[:, self.attention_bias_idxs]
        return attn.softmax(-1)


class MaskFromConstants(nn.Module):
    """EdgeNeXt's positional encoding (``~zeros`` cumulated into a position table) added to the
    input, and a column mask built with bitwise_not that masked_fill applies."""

    def __init__(self, channels=4):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1)
        self.out = nn.Conv2d(channels, channels, 1)

    def forward(self, x):  # x: (B, C, H, W)
        b, _, h, w = x.shape
        inv_mask = ~torch.zeros(b, h, w, dtype=torch.bool)
        y_embed = inv_mask.cumsum(1, dtype=torch.float32)
        pos = (y_embed / y_embed[:, -1:, :]).unsqueeze(1)
        mask = ~(torch.arange(w) < w // 2)
        return self.out(self.conv(x + pos).masked_fill(mask, 0.0))


class StdConv(nn.Conv2d):
    """timm's ScaledStdConv-style weight standardisation: batch norm over the constant weight."""

    def forward(self, x):
        w = F.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None,
                         training=True, momentum=0.0, eps=1e-6).reshape_as(self.weight)
        return F.conv2d(x, w, self.bias, self.stride, self.padding)


class StandardisedConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = StdConv(3, 8, 3, padding=1)
        self.b = StdConv(8, 8, 3, padding=1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


# name -> (module, input shape, ops that compute from constants alone)
SHAPES = {
    "class_token": (ClassToken, (2, 9, 12), {aten.expand.default}),
    "bias_table": (BiasTable, (1, 9, 8), {aten.index.Tensor}),
    "mask": (MaskFromConstants, (1, 4, 5, 6),
             {aten.zeros.default, aten.bitwise_not.default, aten.cumsum.default,
              aten.arange.default, aten.lt.Scalar, aten.div.Tensor}),
    "standardised_conv": (StandardisedConvs, (1, 3, 8, 8),
                          {aten.batch_norm.default, aten.reshape.default,
                           aten.reshape_as.default}),
}


def targets(gm):
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def fold(module, x):
    """(the module exported and folded, whether the pass changed it), checked exact."""
    gm = export_module(module, (x,))
    result = FoldConstants()(gm)
    with torch.no_grad():
        torch.testing.assert_close(result.graph_module(x), module(x), rtol=1e-5, atol=1e-5)
    return result.graph_module, result.modified


@pytest.mark.parametrize("name", list(SHAPES))
def test_constant_computations_become_constants(name):
    factory, shape, folded = SHAPES[name]
    torch.manual_seed(0)
    module = factory().eval()
    gm, modified = fold(module, torch.randn(shape))
    assert modified and not folded & targets(gm), gm.graph
    for node in gm.graph.nodes:  # nothing left computes from constants alone
        if node.op == "call_function":
            assert any(a.op == "placeholder" or a.op == "call_function"
                       for a in node.all_input_nodes), node.format_node()


def test_convolution_weights_are_attributes_and_parameters():
    """A standardised weight becomes the convolution's own constant, a parameter as it was
    computed from one (quantization-aware training still trains it); the original weights,
    read by nothing else, are gone."""
    torch.manual_seed(0)
    gm, _ = fold(StandardisedConvs().eval(), torch.randn(1, 3, 8, 8))
    convs = [n for n in gm.graph.nodes if n.target == aten.conv2d.default]
    params = dict(gm.named_parameters())
    assert len(convs) == 2 and all(c.args[1].op == "get_attr" for c in convs)
    assert all(isinstance(params.get(c.args[1].target), nn.Parameter) for c in convs)
    assert "a.weight" not in params and "b.weight" not in params
    assert all(tuple(c.args[1].meta["val"].shape) == (8, c.args[0].meta["val"].shape[1], 3, 3)
               for c in convs)


def test_a_mask_from_creation_ops_is_a_buffer():
    torch.manual_seed(0)
    gm, _ = fold(MaskFromConstants().eval(), torch.randn(1, 4, 5, 6))
    (fill,) = [n for n in gm.graph.nodes if n.target == aten.masked_fill.Scalar]
    mask = fill.args[1]
    assert mask.op == "get_attr" and mask.target in dict(gm.named_buffers())
    assert torch.equal(getattr(gm, mask.target), torch.arange(6) >= 3)


class Broadcast(nn.Module):
    """A constant broadcast to ``size`` rows before it is added to the input."""

    def __init__(self, width, rows):
        super().__init__()
        self.row = nn.Parameter(torch.randn(1, 1, width))
        self.rows = rows

    def forward(self, x):
        return x + self.row.expand(1, self.rows, -1) * 2


def test_results_beyond_the_bound_are_left_to_run_time():
    """An expand to more than MAX_ELEMENTS elements and more than MAX_GROWTH times its input
    is not stored; up to the bound it is."""
    width = 512
    small = MAX_ELEMENTS // width           # exactly MAX_ELEMENTS elements: folded
    large = MAX_ELEMENTS // width + 1       # one row more, far more than 4x the input
    assert large * width > max(MAX_ELEMENTS, MAX_GROWTH * width)
    torch.manual_seed(0)
    gm, _ = fold(Broadcast(width, small).eval(), torch.randn(1, small, width))
    assert not {aten.expand.default, aten.mul.Tensor} & targets(gm)
    gm, modified = fold(Broadcast(width, large).eval(), torch.randn(1, large, width))
    assert not modified and {aten.expand.default, aten.mul.Tensor} <= targets(gm)


def test_growth_bound_follows_the_inputs():
    """A result larger than MAX_ELEMENTS is folded when at most MAX_GROWTH times its inputs."""
    width = MAX_ELEMENTS // 2
    for rows, folds in ((MAX_GROWTH, True), (MAX_GROWTH + 1, False)):
        gm, modified = fold(Broadcast(width, rows).eval(), torch.randn(1, rows, width))
        assert modified == folds and (aten.expand.default in targets(gm)) != folds


class NotFolded(nn.Module):
    """Random values, a run-time creation op, an in-place update and what reads the buffer it
    updates stay in the graph."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(4))

    def forward(self, x):
        before = self.count * 2
        self.count.add_(1)
        return x + torch.rand(4) * 0 + torch.zeros(4) + before + self.count


def test_random_creation_and_mutating_ops_are_left():
    gm = export_module(NotFolded(), (torch.randn(2, 4),))
    ops = targets(gm)
    result = FoldConstants()(gm)
    assert not result.modified and targets(result.graph_module) == ops
    assert {aten.rand.default, aten.zeros.default, aten.mul.Tensor} <= ops


class Ramp(nn.Module):
    """A ramp made by arange, and zeros, read by run-time ops."""

    def forward(self, x):
        return torch.relu(x + torch.arange(6.0)) + torch.zeros(6)


def test_arange_read_at_run_time_is_stored_and_zeros_stay():
    """``arange`` has no int8 form and becomes a constant; ``zeros`` stays for the converter
    (``full``) and FoldLinearOfZeros."""
    gm, modified = fold(Ramp(), torch.randn(1, 3, 6))
    assert modified and aten.arange.default not in targets(gm)
    assert aten.zeros.default in targets(gm)


@pytest.mark.parametrize("target", TARGETS)
def test_arange_read_at_run_time_compiles_to_the_npu(target):
    inputs = (torch.randn(1, 3, 6),)
    prog = mcu_npu.compile(Ramp(), inputs, target=target, calibration=calibration_set(inputs))
    assert prog.report.summary["ops_on_cpu"] == 0, prog.report
    expected = as_list(prog.reference(*inputs))
    got = prog.run(*inputs)
    for e, g, step in zip(expected, got, reference_output_steps(prog.reference)):
        assert float((g - e).abs().max()) / step <= 1.0 + 1e-3


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(SHAPES))
def test_compiles_with_constants_on_the_npu(name, target):
    """Every op around the folded constants runs on the NPU (the class-token cat, the bias
    table's add, the standardised convolutions), except masked_fill, which has no NPU
    conversion; the host run matches the quantized reference within one output step."""
    factory, shape, _ = SHAPES[name]
    torch.manual_seed(0)
    module = factory().eval()
    inputs = (torch.randn(shape),)
    prog = mcu_npu.compile(module, inputs, target=target, calibration=calibration_set(inputs))
    placements = {o.node: (o.op, o.placement) for o in prog.report.ops}
    cpu = sorted(op for op, p in placements.values() if not p.startswith("NPU partition"))
    assert cpu == (["aten.where.self"] if name == "mask" else []), prog.report
    npu_ops = {op for op, p in placements.values() if p.startswith("NPU partition")}
    assert {"class_token": "aten.cat", "bias_table": "aten.add.Tensor", "mask": "aten.add.Tensor",
            "standardised_conv": "aten.convolution"}[name] in npu_ops, prog.report
    if name == "standardised_conv":  # the folded weights are quantized per output channel
        weights = [n.args[1] for n in prog.reference.graph.nodes
                   if n.target == aten.conv2d.default]
        assert len(weights) == 2 and all(
            w.target == qd.dequantize_per_channel.default and w.args[3] == 0 for w in weights)
    expected = as_list(prog.reference(*inputs))
    got = prog.run(*inputs)
    for e, g, step in zip(expected, got, reference_output_steps(prog.reference)):
        assert g.shape == e.shape
        assert float((g - e).abs().max()) / step <= 1.0 + 1e-3


@pytest.mark.parametrize("target", TARGETS)
def test_quantization_aware_training_trains_folded_weights(target):
    """Standardised weights folded from parameters stay parameters: QAT trains them."""
    trained = {}

    def train(gm):  # one step of training on the fake-quantized graph
        folded = {n: p.detach().clone() for n, p in gm.named_parameters()
                  if n.startswith("_mcu_npu_folded")}
        opt = torch.optim.SGD(gm.parameters(), lr=1e-2)
        gm(*inputs).square().mean().backward()
        opt.step()
        params = dict(gm.named_parameters())
        trained.update({n: not torch.equal(params[n], v) for n, v in folded.items()})

    torch.manual_seed(0)
    inputs = (torch.randn(1, 3, 8, 8),)
    prog = mcu_npu.compile(StandardisedConvs().eval(), inputs, target=target,
                           calibration=calibration_set(inputs), train_fn=train)
    assert len(trained) == 2 and all(trained.values()), trained
    got, expected = prog.run(*inputs)[0], prog.reference(*inputs)
    assert float((got - expected).abs().max()) / reference_output_steps(prog.reference)[0] \
        <= 1.0 + 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("name,cpu_ops", [
    pytest.param(name, ops, marks=public.same_compile(name, "corstone-320"))
    for name, ops in [
        ("vit_tiny_patch16_224", set()),          # class token: expand + cat
        ("levit_128s", {"aten.div.Tensor"}),      # bias tables; the distilled head's (a + b) / 2
    ]])
def test_timm_models_with_constant_subgraphs_compile(name, cpu_ops):
    """Whole timm models that failed on ops over constants compile for corstone-320 with
    every cat and add on the NPU, and the host run is within 1 dB of the reference's SQNR
    over 8 inputs."""
    model, prog, tests, measured = public.compiled(name, "corstone-320")
    off = {o.op for o in prog.report.ops if not o.placement.startswith("NPU partition")}
    assert off <= cpu_ops, prog.report
    assert sqnr_holds(measured["host_sqnr"], measured["ref_sqnr"]), measured


class StrideFill(nn.Module):
    """A detector's stride tensor read out per level (``stride[i].item()``, as ``torch.full``
    of a 0-d tensor traces) into a constant column multiplied onto the input."""

    def __init__(self):
        super().__init__()
        self.register_buffer("stride", torch.tensor([8.0, 16.0]))

    def forward(self, x):
        s = torch.cat([torch.full((3, 1), self.stride[i].item()) for i in range(2)])
        return x * s.transpose(0, 1) + self.stride[1].item()


def test_a_scalar_read_from_a_constant_is_a_number():
    """``item`` of a constant is a number, so the ``full`` it fills folds and no node keeps a
    data-dependent symbol (which every later fake propagation raised on)."""
    gm = export_module(StrideFill(), (torch.randn(1, 6),))
    assert aten.item.default in targets(gm)
    gm, modified = fold(StrideFill(), torch.randn(1, 6))
    assert modified
    assert not {aten.item.default, aten.full.default, aten.select.int} & targets(gm), gm.graph
    assert not any("unbacked_bindings" in n.meta for n in gm.graph.nodes)
    (add,) = [n for n in gm.graph.nodes if n.target == aten.add.Tensor]
    assert add.args[1] == 16.0
