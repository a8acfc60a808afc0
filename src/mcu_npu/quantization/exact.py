"""Host-independent evaluation: the quantized reference and calibration in float64.

A float32 convolution rounds its partial sums in an order that depends on the host's kernels
(oneDNN picks AVX2 / AVX-512 code and blockings by CPU and cache size; ATen picks its
vector width by ``ATEN_CPU_CAPABILITY``), so two x86 machines compute results that differ in
the last bits. In a quantized network such differences do not stay small: an observer's
min / max moves by an ulp and with it a scale, and a value of the converted reference that
lies within an ulp of a rounding boundary (x.5 steps) flips to the other int8 value; the
flips spread through the following layers. Computed in float64 the same sums carry ~2**-29
of a float32 ulp of error, so rounding them to float32 or to int8 gives the same result on
every host (a difference would need a value within ~1e-16 relative of a boundary).

- ``run_exact(reference, *inputs)``: the converted PT2E reference evaluated in float64: every
  dequantize is exact (int * float32 scale fits a double), every op runs on doubles, every
  quantize rounds the double value (half to even, as ``quantize_per_tensor``). This is the
  integer-exact result of the reference's arithmetic for all practical purposes: an integer
  accumulation (sum of int8 * int8 products plus the int32 bias) rescaled by the float32
  scales and rounded once. The float32 reference only approximates it, differently per host.
- ``ExactReference(reference)``: the same as a callable module.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Interpreter

__all__ = ["run_exact", "ExactReference", "to_float64", "to_float32"]

_qd = torch.ops.quantized_decomposed
_QUANTIZE = {
    _qd.quantize_per_tensor.default, _qd.quantize_per_tensor.tensor,
    _qd.quantize_per_tensor.tensor2, _qd.quantize_per_channel.default,
}
_DEQUANTIZE = {
    _qd.dequantize_per_tensor.default, _qd.dequantize_per_tensor.tensor,
    _qd.dequantize_per_tensor.tensor2, _qd.dequantize_per_channel.default,
}


def _double(x):
    if isinstance(x, torch.Tensor) and x.dtype in (torch.float32, torch.float16, torch.bfloat16):
        return x.double()
    return x


def _floating(dtype) -> bool:
    return isinstance(dtype, torch.dtype) and dtype.is_floating_point


def _channel_view(t: torch.Tensor, x: torch.Tensor, axis: int) -> torch.Tensor:
    shape = [1] * x.dim()
    shape[axis] = -1
    return t.reshape(shape)


def _scalar(v) -> float:
    return float(v.item()) if isinstance(v, torch.Tensor) else float(v)


class _Float64(Interpreter):
    """Runs a converted PT2E graph with every floating value in float64."""

    def get_attr(self, target, args, kwargs):
        return _double(super().get_attr(target, args, kwargs))

    def placeholder(self, target, args, kwargs):
        return _double(super().placeholder(target, args, kwargs))

    def call_function(self, target, args, kwargs):
        if target in _DEQUANTIZE:
            return self._dequantize(target, *args, **kwargs)
        if target in _QUANTIZE:
            return self._quantize(target, *args, **kwargs)
        args = torch.fx.node.map_aggregate(args, _double)
        kwargs = torch.fx.node.map_aggregate(kwargs, _double)
        kwargs = {k: (torch.float64 if k == "dtype" and _floating(v) else v)
                  for k, v in kwargs.items()}  # casts and checks inside an autocast region too
        return target(*args, **kwargs)

    @staticmethod
    def _dequantize(target, x, scale, zero_point, *rest, **kwargs):
        if target == _qd.dequantize_per_channel.default:
            axis = rest[0]
            s = _channel_view(scale.to(torch.float32).double(), x, axis)
            z = _channel_view(zero_point.to(torch.int64), x, axis)
        else:
            s = torch.tensor(_scalar(scale), dtype=torch.float32).double()
            z = int(_scalar(zero_point))
        return (x.to(torch.int64) - z).double() * s

    @staticmethod
    def _quantize(target, x, scale, zero_point, *rest, **kwargs):
        if target == _qd.quantize_per_channel.default:
            axis, qmin, qmax, dtype = rest[:4]
            s = _channel_view(scale.to(torch.float32).double(), x, axis)
            z = _channel_view(zero_point.to(torch.int64), x, axis).double()
        else:
            qmin, qmax, dtype = rest[:3]
            s = torch.tensor(_scalar(scale), dtype=torch.float32).double()
            z = float(int(_scalar(zero_point)))
        x = _double(x)
        return torch.clamp(torch.round(x / s) + z, qmin, qmax).to(dtype)


def run_exact(reference: GraphModule, *inputs: torch.Tensor):
    """``reference(*inputs)`` computed in float64 (see the module docstring); floating
    outputs are returned as float32, rounded once from the double result."""
    with torch.no_grad():
        out = _Float64(reference).run(*inputs)
    return torch.fx.node.map_aggregate(
        out, lambda t: t.float() if isinstance(t, torch.Tensor) and t.dtype == torch.float64
        else t)


class ExactReference(torch.nn.Module):
    """A converted PT2E reference whose forward is ``run_exact``: its outputs are the same on
    every host. Not exportable (use the wrapped ``reference`` for export)."""

    def __init__(self, reference: GraphModule):
        super().__init__()
        self.reference = reference

    def forward(self, *inputs):
        return run_exact(self.reference, *inputs)


def to_float64(module: torch.nn.Module) -> torch.nn.Module:
    """Floating parameters and buffers of ``module`` in float64 (in place)."""
    return module.to(torch.float64)


def to_float32(module: torch.nn.Module) -> torch.nn.Module:
    """Floating parameters and buffers of ``module`` back in float32 (in place)."""
    return module.to(torch.float32)
