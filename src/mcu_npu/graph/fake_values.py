"""Fake values (``node.meta["val"]``) of a whole graph, as ``FakeTensorProp`` computes them,
with the per-tensor quantize / dequantize nodes made by their rule.

A quantized graph holds about two quantize / dequantize nodes per compute node, and fake
tensors run each through its decomposition (a multiply, a round, a clamp and a cast): most
of the time a propagation takes. Their value is known without running them: for a contiguous
input, a contiguous tensor of the input's shape in the op's output dtype (``dtype`` for a
quantize, ``out_dtype`` or float32 for a dequantize), as the elementwise kernels allocate
it. Any other input (strided, or of a dtype the op does not take) runs through fake tensors
as any other op, which then raises where it would.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx import Graph, GraphModule
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

_qd = torch.ops.quantized_decomposed
_QUANTIZE = {_qd.quantize_per_tensor.default, _qd.quantize_per_tensor.tensor,
             _qd.quantize_per_tensor.tensor2}
_DEQUANTIZE = {_qd.dequantize_per_tensor.default, _qd.dequantize_per_tensor.tensor,
               _qd.dequantize_per_tensor.tensor2}


def propagate(gm: GraphModule | Graph, mode: FakeTensorMode, *inputs: FakeTensor):
    """Set every node's fake value from the fake ``inputs`` (``FakeTensorProp``'s
    ``propagate_dont_convert_inputs``); returns the graph's outputs. A bare ``Graph`` (one
    without attribute reads) is interpreted without a GraphModule: making one generates
    the graph's Python code, which interpreting it never reads."""
    if isinstance(gm, Graph):
        holder = torch.nn.Module()  # what the interpreter reads of a module: its graph
        holder.graph = gm
        gm = holder
    return _Propagation(gm, mode).propagate_dont_convert_inputs(*inputs)


def output_dtype(op, args: tuple, kwargs: dict) -> torch.dtype | None:
    """The dtype a per-tensor quantize or dequantize call makes of a contiguous input of the
    dtype it takes, None for any other call or input."""
    if not isinstance(op, torch._ops.OpOverload):
        op = getattr(op, "_op", op)  # an Edge op wraps its ATen overload
    if op not in _QUANTIZE and op not in _DEQUANTIZE or len(args) < 6:
        return None
    x, dtype = args[0], args[5]
    if not isinstance(x, torch.Tensor) or not x.is_contiguous():
        return None
    if op in _QUANTIZE:
        return dtype if x.dtype == torch.float32 else None
    return (kwargs.get("out_dtype") or torch.float32) if x.dtype == dtype else None


class _Propagation(FakeTensorProp):
    def call_function(self, target, args, kwargs):
        dtype = output_dtype(target, args, kwargs)
        if dtype is None:
            return super().call_function(target, args, kwargs)
        return torch.empty(args[0].shape, dtype=dtype, device=args[0].device)
