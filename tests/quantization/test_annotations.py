"""The NpuQuantizer's rules, one test per fusion / sharing rule, read off the prepared
(observers inserted) or converted (quantize / dequantize inserted) PT2E graph."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.fake_quantize import FakeQuantize
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

from zoo.op_cases import Fn
from mcu_npu.quantization import NpuQuantizer
from mcu_npu.upstream.patches import pattern_graphs_traced_once

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed
Q = qd.quantize_per_tensor.default
DQ = qd.dequantize_per_tensor.default
DQ_CH = qd.dequantize_per_channel.default


def random_bn(bn):
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.3, 0.3)
    return bn


def inputs_for(*shapes):
    return tuple(torch.randn(s) for s in shapes)


def prepared(module, inputs) -> GraphModule:
    gm = torch.export.export(module.eval(), inputs).module()
    p = prepare_pt2e(gm, NpuQuantizer())
    for _ in range(4):
        p(*(torch.randn_like(x) for x in inputs))
    p(*inputs)
    return p


def converted(module, inputs) -> GraphModule:
    return convert_pt2e(prepared(module, inputs))


def nodes(gm, *targets) -> list[Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in targets]


def only(gm, *targets) -> Node:
    (n,) = nodes(gm, *targets)
    return n


def is_observer(gm, node) -> bool:
    return node.op == "call_module" and "activation_post_process" in str(node.target)


def observer_of(gm, node: Node):
    """The observer module that observes ``node``'s output in a prepared graph."""
    (user,) = [u for u in node.users if is_observer(gm, u)]
    return getattr(gm, user.target)


def observer_in(gm, node: Node, arg: Node):
    """The observer module whose output ``node`` reads as ``arg``."""
    assert is_observer(gm, arg), arg.format_node()
    return getattr(gm, arg.target)


def qparams(node: Node) -> tuple[float, int]:
    """(scale, zero point) of a per-tensor quantize / dequantize node."""
    assert node.target in (Q, DQ), node.format_node()
    return float(node.args[1]), int(node.args[2])


def output_qparams(node: Node) -> tuple[float, int]:
    (user,) = node.users
    return qparams(user)


def attr(gm, node: Node) -> torch.Tensor:
    return getattr(gm, node.target)


# -- fused activations -------------------------------------------------------------------------
def _assert_fused(name, module, inputs, producer_targets, act_targets):
    p = prepared(module, inputs)
    producer = only(p, *producer_targets)
    (act,) = producer.users
    assert act.target in act_targets, f"{name}: {producer} feeds {act.format_node()}"
    (observer,) = act.users
    assert is_observer(p, observer)

    c = convert_pt2e(p)
    producer = only(c, *producer_targets)
    (act,) = producer.users  # no quantize / dequantize pair between the op and its activation
    assert act.target in act_targets
    (q,) = act.users
    assert q.target == Q


def test_conv_relu_has_no_quantization_between():
    _assert_fused("conv+relu", nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()),
                  inputs_for((1, 3, 8, 8)), [aten.conv2d.default], [aten.relu.default])


def test_linear_relu_has_no_quantization_between():
    _assert_fused("linear+relu", nn.Sequential(nn.Linear(6, 5), nn.ReLU()),
                  inputs_for((2, 6)), [aten.linear.default], [aten.relu.default])


@pytest.mark.parametrize("name,act", [
    ("relu6", nn.ReLU6()),
    ("hardtanh", nn.Hardtanh(-0.5, 1.5)),
    ("clamp", Fn(lambda m, x: torch.clamp(x, min=-0.25, max=2.0))),
], ids=["relu6", "hardtanh", "clamp"])
def test_conv_clamp_is_fused(name, act):
    _assert_fused(f"conv+{name}", nn.Sequential(nn.Conv2d(3, 4, 3), act), inputs_for((1, 3, 8, 8)),
                  [aten.conv2d.default], [aten.hardtanh.default, aten.clamp.default])


def test_add_relu_has_no_quantization_between():
    _assert_fused("add+relu", Fn(lambda m, a, b: torch.relu(a + b)), inputs_for((2, 6), (2, 6)),
                  [aten.add.Tensor], [aten.relu.default])


# -- BatchNorm folding -------------------------------------------------------------------------
BN_TARGETS = (aten.batch_norm.default, aten._native_batch_norm_legit_no_training.default,
              aten._native_batch_norm_legit.default)


@pytest.mark.parametrize("name,module,shape", [
    ("conv", lambda: nn.Sequential(nn.Conv2d(3, 6, 3), random_bn(nn.BatchNorm2d(6)), nn.ReLU()),
     (2, 3, 8, 8)),
    ("conv_no_bias", lambda: nn.Sequential(nn.Conv2d(3, 6, 3, bias=False),
                                           random_bn(nn.BatchNorm2d(6))), (2, 3, 8, 8)),
    ("depthwise", lambda: nn.Sequential(nn.Conv2d(4, 4, 3, groups=4),
                                        random_bn(nn.BatchNorm2d(4))), (2, 4, 8, 8)),
    ("linear", lambda: nn.Sequential(nn.Linear(8, 6), random_bn(nn.BatchNorm1d(6)), nn.ReLU()),
     (4, 8)),
], ids=["conv", "conv_no_bias", "depthwise", "linear"])
def test_batchnorm_is_folded(name, module, shape):
    torch.manual_seed(0)
    module = module().eval()
    inputs = inputs_for(shape)
    p = prepared(module, inputs)
    assert not nodes(p, *BN_TARGETS), f"{name}: batch norm left after prepare"
    c = convert_pt2e(p)
    assert not nodes(c, *BN_TARGETS), f"{name}: batch norm left after convert"
    weighted = only(c, aten.conv2d.default, aten.linear.default)
    assert weighted.args[2] is not None, "the folded BN shift becomes the bias"
    expected = module(*inputs)
    err = (c(*inputs) - expected).abs().max() / expected.abs().max()
    assert err < 0.05, f"{name}: folded and quantized output {err:.3f} off"


# -- weights and bias --------------------------------------------------------------------------
WEIGHTED = [
    ("conv", lambda: nn.Conv2d(3, 5, 3), (1, 3, 7, 7), aten.conv2d.default),
    ("depthwise", lambda: nn.Conv2d(4, 4, 3, groups=4), (1, 4, 7, 7), aten.conv2d.default),
    ("linear", lambda: nn.Linear(9, 7), (3, 9), aten.linear.default),
]


@pytest.mark.parametrize("name,module,shape,target", WEIGHTED, ids=[w[0] for w in WEIGHTED])
def test_weights_are_int8_per_channel_symmetric(name, module, shape, target):
    torch.manual_seed(0)
    m = module()
    c = converted(m, inputs_for(shape))
    wdq = only(c, target).args[1]
    assert wdq.target == DQ_CH
    _, scale, zero_point, axis, qmin, qmax, dtype = wdq.args
    assert (axis, qmin, qmax, dtype) == (0, -127, 127, torch.int8)
    scales, zps = attr(c, scale), attr(c, zero_point)
    assert scales.numel() == m.weight.shape[0]
    assert torch.all(zps == 0)
    q = attr(c, wdq.args[0])
    assert q.dtype == torch.int8 and q.min() >= -127 and q.max() <= 127
    # symmetric: the largest magnitude of each channel maps to (almost exactly) 127
    per_channel_max = q.abs().flatten(1).max(dim=1).values
    assert torch.all(per_channel_max >= 126)
    torch.testing.assert_close(scales, m.weight.detach().abs().flatten(1).max(dim=1).values / 127,
                               rtol=1e-3, atol=1e-7)


@pytest.mark.parametrize("name,module,shape,target", WEIGHTED, ids=[w[0] for w in WEIGHTED])
def test_bias_is_int32_with_input_times_weight_scale(name, module, shape, target):
    torch.manual_seed(0)
    c = converted(module(), inputs_for(shape))
    op = only(c, target)
    x_scale, _ = qparams(op.args[0])
    wdq, bdq = op.args[1], op.args[2]
    assert bdq.target == DQ_CH
    _, scale, zero_point, axis, qmin, qmax, dtype = bdq.args
    assert (axis, qmin, qmax, dtype) == (0, -(2**31), 2**31 - 1, torch.int32)
    assert attr(c, bdq.args[0]).dtype == torch.int32
    assert torch.all(attr(c, zero_point) == 0)
    torch.testing.assert_close(attr(c, scale).double(), x_scale * attr(c, wdq.args[1]).double(),
                               rtol=1e-6, atol=0)


# -- data movement shares its input's parameters -----------------------------------------------
def _pre(x):
    """A producer with its own output quantization, so sharing is visible."""
    return x * 1.5


SHARED = [
    ("max_pool2d", lambda x: F.max_pool2d(_pre(x), 2), [(1, 3, 6, 6)], aten.max_pool2d.default),
    ("avg_pool2d", lambda x: F.avg_pool2d(_pre(x), 2), [(1, 3, 6, 6)], aten.avg_pool2d.default),
    ("reshape", lambda x: _pre(x).reshape(2, -1), [(2, 3, 4)], aten.reshape.default),
    ("view", lambda x: _pre(x).view(6, 4), [(2, 3, 4)], aten.view.default),
    ("flatten", lambda x: torch.flatten(_pre(x), 1), [(2, 3, 4)], aten.flatten.using_ints),
    ("permute", lambda x: _pre(x).permute(0, 2, 1), [(2, 3, 4)], aten.permute.default),
    ("transpose", lambda x: _pre(x).transpose(1, 2), [(2, 3, 4)], aten.transpose.int),
    ("squeeze", lambda x: _pre(x).squeeze(1), [(2, 1, 4)], aten.squeeze.dim),
    ("unsqueeze", lambda x: _pre(x).unsqueeze(1), [(2, 4)], aten.unsqueeze.default),
    ("slice", lambda x: _pre(x)[:, 1:3], [(2, 5)], aten.slice.Tensor),
    ("pad", lambda x: F.pad(_pre(x), (1, 2)), [(2, 5)], aten.pad.default),
]


@pytest.mark.parametrize("name,fn,shapes,target", SHARED, ids=[s[0] for s in SHARED])
def test_data_movement_keeps_input_parameters(name, fn, shapes, target):
    p = prepared(Fn(lambda m, x: fn(x)), inputs_for(*shapes))
    op = only(p, target)
    # one observer for input and output (for reshape-like ops the values alone could not tell)
    assert observer_of(p, op) is observer_in(p, op, op.args[0])
    c = convert_pt2e(p)
    op = only(c, target)
    assert op.args[0].target == DQ
    assert output_qparams(op) == qparams(op.args[0])
    # and the input is the producer's own quantization, not a requantized copy
    assert qparams(op.args[0]) == output_qparams(only(c, aten.mul.Tensor))


def test_cat_inputs_and_output_share_parameters():
    p = prepared(Fn(lambda m, a, b: torch.cat([a * 1.5, b * 4.0], dim=1)),
                 inputs_for((2, 3), (2, 4)))
    cat = only(p, aten.cat.default)
    observers = {id(observer_in(p, cat, t)) for t in cat.args[0]} | {id(observer_of(p, cat))}
    assert len(observers) == 1
    c = convert_pt2e(p)
    cat = only(c, aten.cat.default)
    params = {qparams(t) for t in cat.args[0]} | {output_qparams(cat)}
    assert len(params) == 1, params


def test_split_pieces_keep_input_parameters():
    p = prepared(Fn(lambda m, x: [t * 1.0 + 0.5 for t in torch.split(x * 1.5, [2, 3], dim=1)]),
                 inputs_for((2, 5)))
    split = only(p, aten.split_with_sizes.default, aten.split.Tensor)
    for piece in split.users:
        assert observer_of(p, piece) is observer_in(p, split, split.args[0])
    c = convert_pt2e(p)
    split = only(c, aten.split_with_sizes.default, aten.split.Tensor)
    x_params = qparams(split.args[0])
    pieces = [u for u in split.users if u.target is operator.getitem]
    assert len(pieces) == 2
    for piece in pieces:
        assert output_qparams(piece) == x_params


# -- fixed output parameters -------------------------------------------------------------------
@pytest.mark.parametrize("name,module,target,expected", [
    ("sigmoid", nn.Sigmoid(), aten.sigmoid.default, (1 / 256, -128)),
    ("softmax", nn.Softmax(dim=-1), aten.softmax.int, (1 / 256, -128)),
    ("tanh", nn.Tanh(), aten.tanh.default, (1 / 128, 0)),
], ids=["sigmoid", "softmax", "tanh"])
def test_fixed_output_parameters(name, module, target, expected):
    c = converted(Fn(lambda m, x: m[0](x * 3.0), module), inputs_for((2, 7)))
    op = only(c, target, aten._softmax.default)
    scale, zero_point = output_qparams(op)
    assert scale == pytest.approx(expected[0], rel=1e-7) and zero_point == expected[1]


# -- QAT ---------------------------------------------------------------------------------------
class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(6 * 4 * 4, 4)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.relu(self.bn(self.conv(x)))), 1))


def test_qat_prepare_train_convert():
    torch.manual_seed(0)
    model = SmallNet()
    x = torch.randn(8, 3, 8, 8)
    target = torch.randint(0, 4, (8,))
    gm = torch.export.export(model.train(), (x,)).module()
    with pattern_graphs_traced_once():  # as mcu_npu runs torchao's QAT rewrites
        p = prepare_qat_pt2e(gm, NpuQuantizer(is_qat=True))
    fake_quants = [m for m in p.modules() if isinstance(m, FakeQuantize)]
    assert len(fake_quants) >= 5  # input, conv weight, relu out, pool/fc in, fc weight, fc out

    opt = torch.optim.SGD(p.parameters(), lr=0.05)
    before = [t.detach().clone() for t in p.parameters()]
    losses = []
    for _ in range(3):
        loss = F.cross_entropy(p(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert any(not torch.equal(a, b) for a, b in zip(before, p.parameters()))

    from torchao.quantization.pt2e import move_exported_model_to_eval

    with pattern_graphs_traced_once():
        move_exported_model_to_eval(p)
        with torch.no_grad():
            simulated = p(x)
        c = convert_pt2e(p)
    assert not nodes(c, *BN_TARGETS), "conv + BN must be folded by convert_pt2e"
    conv = only(c, aten.conv2d.default)
    (relu,) = conv.users
    assert relu.target == aten.relu.default and list(relu.users)[0].target == Q
    assert conv.args[1].target == DQ_CH and conv.args[1].args[4:6] == (-127, 127)
    assert nodes(c, Q) and not [m for m in c.modules() if isinstance(m, FakeQuantize)]
    with torch.no_grad():
        out = c(x)
    # the converted model computes what fake quantization simulated, to about an output step
    step, _ = output_qparams(only(c, aten.linear.default))
    assert (out - simulated).abs().max() <= 2 * step


def test_the_npu_quantizer_keeps_its_former_name():
    """``NpuQuantizer`` quantizes for every NPU here; code written against its former name,
    ``NeutronQuantizer``, gets the same class."""
    from mcu_npu.quantization import NeutronQuantizer, NpuQuantizer

    assert NeutronQuantizer is NpuQuantizer
