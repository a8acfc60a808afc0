"""Fake values (``node.meta["val"]``) of a whole graph, as ``FakeTensorProp`` computes them,
with the per-tensor quantize / dequantize nodes made by their rule.

A quantized graph holds about two quantize / dequantize nodes per compute node, and fake
tensors run each through its decomposition (a multiply, a round, a clamp and a cast): most
of the time a propagation takes. Their value is known without running them: for a contiguous
input, a contiguous tensor of the input's shape in the op's output dtype (``dtype`` for a
quantize, ``out_dtype`` or float32 for a dequantize), as the elementwise kernels allocate
it. Any other input (strided, or of a dtype the op does not take) runs through fake tensors
as any other op, which then raises where it would.

An unrolled recurrent graph also calls the same op on inputs of the same layouts thousands of
times. Fake tensors carry no data, so the value of an op returning one fresh tensor (no alias
of an input, no mutation) is a function of its call (``call_key``: the op, its inputs'
layouts, its other arguments): a repeated call gets a new fake tensor of the layout the
first one gave, made as the fake mode's own dispatch cache makes it, without dispatching.
"""

from __future__ import annotations

import functools
import weakref
from typing import Callable

import torch
from torch.fx import Graph, GraphModule
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from ..upstream.private import FakeTensor, FakeTensorMode, in_kernel_invocation_manager
from ..upstream.private import quantized_decomposed_ops  # noqa: F401  (registers the ops)



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
    return _Memoized(gm, mode).propagate_dont_convert_inputs(*inputs)


def forget_pending_symbols(mode: FakeTensorMode) -> None:
    """Drop the data-dependent symbols (an ``item``'s value) that an earlier computation made
    and never bound to a node: the propagation binds those its node makes, and raises
    (``PendingUnbackedSymbolNotFound``) on any left from before, which no node of its own
    returns."""
    env = getattr(mode, "shape_env", None)
    if env is not None and env.pending_fresh_unbacked_symbols:
        env.pending_fresh_unbacked_symbols.clear()


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
    def run_node(self, n):
        forget_pending_symbols(self._mode)
        return super().run_node(n)

    def call_function(self, target, args, kwargs):
        dtype = output_dtype(target, args, kwargs)
        if dtype is None:
            return super().call_function(target, args, kwargs)
        return torch.empty(args[0].shape, dtype=dtype, device=args[0].device)


class _Memoized(_Propagation):
    """The propagation, a repeated call of a fresh-tensor op made from its first value."""

    def __init__(self, gm, mode):
        super().__init__(gm, mode)
        self._memo = CallMemo(mode)

    def call_function(self, target, args, kwargs):
        return self._memo.call(target, args, kwargs,
                               lambda: super(_Memoized, self).call_function(target, args, kwargs))


class CallMemo:
    """Fake values of fresh-tensor calls on fake tensors of one mode, by ``call_key``: a
    repeated call gets a new fake tensor of the layout the first one gave (module
    docstring). ``memo_of(mode)`` is the one kept with a mode."""

    def __init__(self, mode: FakeTensorMode):
        self.mode = mode
        self._calls: dict[tuple, tuple] = {}  # call key -> its value's layout

    def call(self, target, args, kwargs, run: Callable[[], object]):
        """``target(*args, **kwargs)`` as ``run()`` gives it, from the memo where known."""
        key = call_key(target, args, kwargs, self.mode)
        if key is None:
            return run()
        key = (key, torch.is_grad_enabled())  # a value kept from a call not requiring grad
        made = self._calls.get(key)
        if made is not None:
            return _fake_of(made, self.mode)
        result = run()
        if plain_fake(result, self.mode) and not result.requires_grad and \
                not result.is_conj() and not result.is_neg() and \
                result.storage_offset() == 0 and result.layout == torch.strided and \
                not _shares_storage(result, (args, kwargs)):
            self._calls[key] = layout(result)
        return result


_MEMOS: "weakref.WeakKeyDictionary[FakeTensorMode, CallMemo]" = weakref.WeakKeyDictionary()


def memo_of(mode: FakeTensorMode) -> CallMemo:
    """The ``CallMemo`` kept with ``mode`` for as long as the mode lives (the passes that
    compute one node's value at a time share it: an unrolled recurrent layer's cells repeat
    the same calls)."""
    memo = _MEMOS.get(mode)
    if memo is None:
        memo = _MEMOS[mode] = CallMemo(mode)
    return memo


def _shares_storage(t: torch.Tensor, args) -> bool:
    """``t`` lies in the storage of a tensor among ``args`` (an op that returns its input
    unannotated): as the fake mode's cache, such a value is not kept."""
    if isinstance(args, torch.Tensor):
        return args.untyped_storage()._cdata == t.untyped_storage()._cdata
    if isinstance(args, dict):
        args = args.values()
    return isinstance(args, (list, tuple, type({}.values()))) and \
        any(_shares_storage(t, a) for a in args)


def _fake_of(made: tuple, mode: FakeTensorMode) -> FakeTensor:
    """A new fake tensor of ``mode`` with the layout ``made`` (as ``layout`` gives it: a
    strided tensor at offset 0, not requiring grad), as the mode's dispatch cache makes an
    op's output."""
    shape, stride, dtype, device, _, _ = made
    with in_kernel_invocation_manager(mode):
        empty = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    return FakeTensor(mode, empty, device)


def layout(t: torch.Tensor) -> tuple:
    """A tensor's shape, stride, dtype, device, storage offset and layout."""
    return (tuple(t.shape), tuple(t.stride()), t.dtype, t.device, t.storage_offset(), t.layout)


def plain_fake(t, mode: FakeTensorMode) -> bool:
    """``t`` is a fake tensor of ``mode`` of static sizes, not a constant."""
    return isinstance(t, FakeTensor) and t.fake_mode is mode and t.constant is None and \
        all(type(s) is int for s in (*t.shape, *t.stride()))


@functools.cache
def fresh_single_output(target) -> bool:
    """An op returning one tensor that aliases no input, and mutating none."""
    op = target if isinstance(target, torch._ops.OpOverload) else getattr(target, "_op", None)
    if not isinstance(op, torch._ops.OpOverload):
        return False
    schema = op._schema
    returns = schema.returns
    return len(returns) == 1 and isinstance(returns[0].type, torch.TensorType) and \
        returns[0].alias_info is None and \
        all(a.alias_info is None for a in schema.arguments)


def call_key(target, args, kwargs, mode):
    """What the value of ``target(*args, **kwargs)`` on fake tensors of ``mode`` depends on,
    or None when that is not all known here (another op, a non-static or non-plain tensor,
    an odd argument)."""
    if not fresh_single_output(target):
        return None
    try:
        return (target, _arg_key(args, mode), _arg_key(tuple(sorted(kwargs.items())), mode))
    except _Unkeyable:
        return None


class _Unkeyable(Exception):
    pass


def _arg_key(a, mode):
    if isinstance(a, torch.Tensor):
        if not plain_fake(a, mode):
            raise _Unkeyable
        return ("T", *layout(a), a.requires_grad, a.is_conj(), a.is_neg())
    if isinstance(a, (list, tuple)):
        return (type(a), tuple(_arg_key(v, mode) for v in a))
    if a is None or isinstance(a, (bool, int, str, torch.dtype, torch.device,
                                   torch.memory_format, torch.layout)):
        return (type(a), a)
    if type(a) is float:
        return (float, repr(a))
    raise _Unkeyable
