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

from typing import Callable

import torch
from torch.fx import GraphModule, Interpreter

from ..upstream.private import quantized_decomposed_ops  # noqa: F401  (registers the ops)


__all__ = ["run_exact", "run_graph_exact", "exact_runner", "ExactReference", "to_float64", "to_float32"]

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
    """Runs a converted PT2E graph with every floating value in float64. ``run_exact``
    runs the same steps without the Interpreter (``_Steps``); this serves the graphs
    those do not take (a ``call_module`` node, a starred placeholder)."""

    def get_attr(self, target, args, kwargs):
        return _double(super().get_attr(target, args, kwargs))

    def placeholder(self, target, args, kwargs):
        return _double(super().placeholder(target, args, kwargs))

    def call_function(self, target, args, kwargs):
        if target in _DEQUANTIZE:
            return _dequantize(target, *args, **kwargs)
        if target in _QUANTIZE:
            return _quantize(target, *args, **kwargs)
        return _call_float64(target, args, kwargs)


def _call_float64(target, args, kwargs):
    """``target`` on ``args`` with floating tensors and a floating ``dtype`` in float64."""
    args = torch.fx.node.map_aggregate(args, _double)
    kwargs = torch.fx.node.map_aggregate(kwargs, _double)
    kwargs = {k: (torch.float64 if k == "dtype" and _floating(v) else v)
              for k, v in kwargs.items()}  # casts and checks inside an autocast region too
    return target(*args, **kwargs)


def _per_tensor_scale(scale) -> torch.Tensor:
    """A per-tensor scale as the double of its float32 value."""
    return torch.tensor(_scalar(scale), dtype=torch.float32).double()


def _dequantize(target, x, scale, zero_point, *rest, s=None, z=None, **kwargs):
    """``(x - zero_point) * scale`` in float64, exactly (``s``, ``z``: a per-tensor scale and
    zero point prepared by ``_per_tensor_scale`` and ``int``)."""
    if target == _qd.dequantize_per_channel.default:
        axis = rest[0]
        s = _channel_view(scale.to(torch.float32).double(), x, axis)
        z = _channel_view(zero_point.to(torch.int64), x, axis)
    elif s is None:
        s = _per_tensor_scale(scale)
        z = int(_scalar(zero_point))
    if isinstance(z, int) and z == 0 and not x.is_floating_point():
        return x.double() * s  # an integer tensor is exact in float64 as it is
    return (x.to(torch.int64) - z).double() * s


def _quantize(target, x, scale, zero_point, *rest, s=None, z=None, **kwargs):
    """``round(x / scale) + zero_point`` clamped to the integer range, rounding the double
    value half to even (``s``, ``z``: a per-tensor scale and zero point prepared as
    ``_per_tensor_scale`` and ``float(int(...))``)."""
    if target == _qd.quantize_per_channel.default:
        axis, qmin, qmax, dtype = rest[:4]
        s = _channel_view(scale.to(torch.float32).double(), x, axis)
        z = _channel_view(zero_point.to(torch.int64), x, axis).double()
    else:
        qmin, qmax, dtype = rest[:3]
        if s is None:
            s = _per_tensor_scale(scale)
            z = float(int(_scalar(zero_point)))
    q = torch.round(_double(x) / s)
    if not (isinstance(z, float) and z == 0.0):  # + 0.0 changes only a zero's sign
        q = q + z
    return torch.clamp(q, qmin, qmax).to(dtype)


class _Slot:
    """A node's value in ``_Steps``'s environment."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def _template(arg, slots: dict):
    """``arg`` with each node replaced by its ``_Slot``; None when it holds no node."""
    found = False

    def swap(a):
        nonlocal found
        if isinstance(a, torch.fx.Node):
            found = True
            return slots[a]
        return a

    out = torch.fx.node.map_aggregate(arg, swap)
    return out if found else None


def _load(a, env: list):
    if type(a) is _Slot:
        return env[a.index]
    if isinstance(a, (list, tuple)):
        if hasattr(a, "_fields"):  # a named tuple
            return type(a)(*(_load(x, env) for x in a))
        return type(a)(_load(x, env) for x in a)
    if isinstance(a, dict):
        return {k: _load(v, env) for k, v in a.items()}
    return a


def _double_all(a):
    if isinstance(a, torch.Tensor):
        return _double(a)
    if isinstance(a, (list, tuple)):
        if hasattr(a, "_fields"):
            return type(a)(*(_double_all(x) for x in a))
        return type(a)(_double_all(x) for x in a)
    return a


class _Steps:
    """A graph's nodes as prepared calls, run in order without ``torch.fx.Interpreter``:
    the same ops on the same values as ``_Float64``, without its per-node dispatch and
    with each per-tensor scale and zero point made once (on the GRU keyword spotter's
    reference about half the CPU time per sample)."""

    def __init__(self, gm: GraphModule):
        self.gm = gm
        nodes = list(gm.graph.nodes)
        slots = {n: _Slot(i) for i, n in enumerate(nodes)}
        last_use = {}
        for i, n in enumerate(nodes):
            for a in n.all_input_nodes:
                last_use[a] = i
        self.free = [[] for _ in nodes]
        for n, i in last_use.items():
            self.free[i].append(slots[n].index)
        self.steps = []
        self._scales: dict[float, torch.Tensor] = {}  # one tensor per scale value
        for i, n in enumerate(nodes):
            if n.op == "placeholder" and not str(n.target).startswith("*"):
                self.steps.append((i, "placeholder", n.args[0] if n.args else _NONE, None))
            elif n.op == "get_attr":
                self.steps.append((i, "get_attr", n.target, None))
            elif n.op == "output":
                self.steps.append((i, "output", _template(n.args[0], slots), n.args[0]))
            elif n.op == "call_function":
                self.steps.append((i, "call", n.target, self._call(n, slots, self._scales)))
            else:
                raise _NotPlain(n.op)
        self.nodes = nodes

    @staticmethod
    def _call(n, slots, scales: dict):
        args, kwargs = _template(n.args, slots), _template(n.kwargs, slots)
        args = n.args if args is None else args
        kwargs = dict(n.kwargs) if kwargs is None else kwargs
        prepared = {}
        if n.target in _QUANTIZE or n.target in _DEQUANTIZE:
            if n.target in (_qd.quantize_per_tensor.default, _qd.dequantize_per_tensor.default) \
                    and len(args) > 2 and not isinstance(args[1], _Slot) \
                    and not isinstance(args[2], _Slot):
                scale = _scalar(args[1])
                if scale not in scales:
                    scales[scale] = _per_tensor_scale(scale)
                prepared["s"] = scales[scale]
                z = int(_scalar(args[2]))
                prepared["z"] = z if n.target in _DEQUANTIZE else float(z)
            kind = "dq" if n.target in _DEQUANTIZE else "q"
        else:
            kind = "f"
            kwargs = {k: (torch.float64 if k == "dtype" and _floating(v) else v)
                      for k, v in kwargs.items()}
        return kind, args, kwargs, prepared

    def run(self, *inputs, keep: dict | None = None):
        """The graph on ``inputs``; ``keep``: a dict that receives every node's value."""
        env: list = [None] * len(self.nodes)
        inputs = iter(self.gm.graph.process_inputs(*inputs))
        for i, op, target, call in self.steps:
            if op == "call":
                kind, args, kwargs, prepared = call
                args = _load(args, env)
                kwargs = _load(kwargs, env)
                if kind == "f":
                    value = target(*_double_all(args), **{
                        k: _double_all(v) for k, v in kwargs.items()})
                elif kind == "dq":
                    value = _dequantize(target, *args, **kwargs, **prepared)
                else:
                    value = _quantize(target, *args, **kwargs, **prepared)
            elif op == "placeholder":
                value = next(inputs, target)
                if value is _NONE:
                    raise RuntimeError(f"run_exact: no value for input {self.nodes[i].name}")
                value = _double(value)
            elif op == "get_attr":
                value = _double(self._attr(target))
            else:
                out = _load(target, env) if target is not None else call
                if keep is not None:
                    keep[self.nodes[i]] = out
                return self.gm.graph.process_outputs(out)
            env[i] = value
            if keep is not None:
                keep[self.nodes[i]] = value
            for j in self.free[i]:
                env[j] = None
        raise RuntimeError("run_exact: the graph has no output node")

    def _attr(self, target: str):
        obj = self.gm
        for atom in target.split("."):
            obj = getattr(obj, atom)
        return obj


_NONE = object()


class _NotPlain(Exception):
    """A graph ``_Steps`` does not take (run by ``_Float64``)."""


def exact_runner(gm: GraphModule) -> Callable:
    """``gm``'s float64 evaluation (as ``_Float64`` computes it) with its steps prepared
    once, for many runs: ``runner(*inputs, keep=None)``, ``keep`` a dict receiving every
    node's value. Make it after the graph's last edit."""
    try:
        return _Steps(gm).run
    except _NotPlain:
        pass

    def interpret(*inputs, keep: dict | None = None):
        interp = _Float64(gm)
        if keep is None:
            return interp.run(*inputs)
        interp.garbage_collect_values = False
        out = interp.run(*inputs)
        keep.update(interp.env)
        return out

    return interpret


def run_graph_exact(gm: GraphModule, *inputs, keep: dict | None = None):
    """``gm`` on ``inputs`` computed as ``_Float64`` does, once (``exact_runner``)."""
    return exact_runner(gm)(*inputs, keep=keep)


def run_exact(reference: GraphModule, *inputs: torch.Tensor, runner: Callable | None = None):
    """``reference(*inputs)`` computed in float64 (see the module docstring); floating
    outputs are returned as float32, rounded once from the double result. ``runner``:
    ``exact_runner(reference)``, made once for many samples."""
    with torch.no_grad():
        out = (runner or exact_runner(reference))(*inputs)
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
