"""``quantization.exact``: ``run_exact`` and ``run_graph_exact`` (prepared steps, no
Interpreter) give bit for bit what the exact arithmetic spelled out node by node in a plain
``torch.fx.Interpreter`` gives, on every node of a converted reference."""

from __future__ import annotations

import torch
from torch.fx import Interpreter

from mcu_npu.quantization import NpuQuantizer, quantize
from mcu_npu.quantization.exact import run_exact, run_graph_exact

_qd = torch.ops.quantized_decomposed


class _Spelled(Interpreter):
    """Float64 evaluation as ``quantization.exact``'s docstring states it, one node at a
    time: every dequantize ``(q - zero_point) * scale``, every quantize rounds the double,
    every other op on doubles."""

    def __init__(self, gm):
        super().__init__(gm, garbage_collect_values=False)

    @staticmethod
    def _d(x):
        return x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x

    def placeholder(self, target, args, kwargs):
        return self._d(super().placeholder(target, args, kwargs))

    def get_attr(self, target, args, kwargs):
        return self._d(super().get_attr(target, args, kwargs))

    def call_function(self, target, args, kwargs):
        if target in (_qd.dequantize_per_tensor.default, _qd.dequantize_per_channel.default):
            x, scale, zp = args[:3]
            if target == _qd.dequantize_per_channel.default:
                shape = [1] * x.dim()
                shape[args[3]] = -1
                s = scale.to(torch.float32).double().reshape(shape)
                z = zp.to(torch.int64).reshape(shape)
            else:
                s, z = torch.tensor(float(scale), dtype=torch.float32).double(), int(zp)
            return (x.to(torch.int64) - z).double() * s
        if target == _qd.quantize_per_tensor.default:
            x, scale, zp, qmin, qmax, dtype = args
            s = torch.tensor(float(scale), dtype=torch.float32).double()
            return torch.clamp(torch.round(self._d(x) / s) + float(zp), qmin, qmax).to(dtype)
        assert "quantize" not in str(target), target
        args = torch.fx.node.map_aggregate(args, self._d)
        kwargs = {k: (torch.float64 if k == "dtype" and v == torch.float32 else self._d(v))
                  for k, v in kwargs.items()}
        return target(*args, **kwargs)


class _Net(torch.nn.Module):
    """Asymmetric int8 (ReLU), zero-point-0 outputs (tanh), sigmoid, a concatenation, a
    convolution's and a linear's per-channel weights."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.fc = torch.nn.Linear(12 * 4 * 4, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        z = torch.cat([torch.tanh(y), torch.sigmoid(y)], dim=1)
        z = torch.nn.functional.max_pool2d(z, 2)
        return self.fc(z.flatten(1)), torch.tanh(z.mean(dim=(2, 3)))


def _reference_and_samples():
    torch.manual_seed(0)
    model = _Net().eval()
    g = torch.Generator().manual_seed(5)
    samples = [(torch.randn(1, 3, 8, 8, generator=g),) for _ in range(10)]
    graph = torch.export.export(model, samples[0]).module()
    return quantize(graph, samples[0], samples[:6], NpuQuantizer()), samples


def _equal(a, b) -> bool:
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a == b


def test_run_exact_equals_the_spelled_out_arithmetic_on_every_node():
    reference, samples = _reference_and_samples()
    zero_points = {int(n.args[2]) for n in reference.graph.nodes
                   if n.target == _qd.dequantize_per_tensor.default}
    assert 0 in zero_points and len(zero_points) > 1  # both dequantize paths are taken
    for (x,) in samples:
        spelled = _Spelled(reference)
        with torch.no_grad():
            want = spelled.run(x)
        kept = {}
        with torch.no_grad():
            got = run_graph_exact(reference, x, keep=kept)
        assert _equal(got, want)
        assert set(kept) == set(spelled.env)
        assert all(_equal(kept[n], spelled.env[n]) for n in kept)
        floats = run_exact(reference, x)
        assert all(f.dtype == torch.float32 for f in floats)
        assert _equal(floats, [w.float() for w in want])
