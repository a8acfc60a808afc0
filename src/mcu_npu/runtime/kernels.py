"""ExecuTorch kernel calls as torch op calls: operator lookup, argument binding, prim ops.

A KernelCall names an operator and lists value indices: the schema's arguments in order,
then the returned values. Out-variants write their `out` arguments in place, as on the board.
"""

from __future__ import annotations

import importlib
import math
import operator
from typing import Callable, NamedTuple, Sequence

import torch

from ..device.pte_file import SCALAR_TYPES
from ..errors import InvalidProgramError
from ..upstream.patches import import_cortex_m_ops

Kernel = Callable[["Frame", Sequence[int]], None]


# ExecuTorch's ScalarType codes (they match c10's) and the torch dtypes they stand for.
_DTYPES = {code: getattr(torch, name) for code, (name, _) in SCALAR_TYPES.items()}


def dtype_of(scalar_type: int) -> torch.dtype:
    """The torch dtype of an ExecuTorch ScalarType code."""
    try:
        return _DTYPES[int(scalar_type)]
    except KeyError:
        raise InvalidProgramError(f"unknown tensor scalar type {int(scalar_type)}") from None


class Boxed(NamedTuple):
    """A list value whose items are other values (IntList, TensorList, OptionalTensorList)."""

    kind: str  # "int", "tensor" or "optional"
    ids: tuple[int, ...]


class Frame:
    """The live values of one method, read and written by index."""

    def __init__(self, values: list, none_ids: set[int], dim_orders: dict[int, tuple] | None = None):
        self.values = values
        self.none_ids = none_ids  # empty tensors the emitter writes for an absent `Tensor?`
        self.dim_orders = dim_orders or {}  # the .pte's dim order of each tensor value

    def dim_order(self, index: int) -> tuple[int, ...]:
        """The dim order the program gives tensor value ``index`` (contiguous if unknown)."""
        return self.dim_orders.get(index, tuple(range(self.values[index].dim())))

    def read(self, index: int, optional: bool = False):
        value = self.values[index]
        if isinstance(value, Boxed):
            return [None if i < 0 or (value.kind == "optional" and i in self.none_ids)
                    else self.values[i] for i in value.ids]
        if optional and index in self.none_ids:
            return None
        return value

    def write(self, index: int, value) -> None:
        """Store a result: tensors are copied into their planned memory, scalars replaced."""
        current = self.values[index]
        if isinstance(current, torch.Tensor) and isinstance(value, torch.Tensor):
            if current.shape != value.shape:
                current.resize_(value.shape)
            current.copy_(value)
        else:
            self.values[index] = value


_NAMESPACE_MODULES = {
    "quantized_decomposed": ("torch.ao.quantization.fx._decomposed", "executorch.kernels.quantized",
                             "executorch.exir.passes._quant_patterns_and_replacements"),
    "dim_order_ops": ("executorch.exir.passes.dim_order_ops_registry",),
}


def _load_namespace(namespace: str) -> None:
    """Import the modules that register a namespace's ops, only when a program uses it."""
    if namespace == "cortex_m":  # with or without the optional Arm/TOSA stack
        import_cortex_m_ops()
    for module in _NAMESPACE_MODULES.get(namespace, ()):
        importlib.import_module(module)


def _scalar(fn: Callable) -> Kernel:
    def run(frame: Frame, args: Sequence[int]) -> None:
        frame.write(args[-1], fn(*(frame.read(i) for i in args[:-1])))
    return run


def _et_view(frame: Frame, args: Sequence[int]) -> None:
    self_, size, out = args
    frame.values[out] = frame.read(self_).view(frame.read(size))


def _et_copy_index(frame: Frame, args: Sequence[int]) -> None:
    """Write `copy_from` as row `index` of `copy_to`, which grows to index + 1 rows."""
    copy_to, copy_from, index = (frame.read(i) for i in args[:3])
    copy_to.resize_((index + 1, *copy_from.shape))
    copy_to[index].copy_(copy_from)


_PRIM = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "floordiv": operator.floordiv, "truediv": operator.truediv, "mod": operator.mod,
    "eq": operator.eq, "gt": operator.gt, "lt": operator.lt, "ge": operator.ge, "le": operator.le,
    "neg": operator.neg, "ceil": math.ceil, "round": round, "trunc": math.trunc,
    "sym_float": float, "sym_int": int, "sym_max": max, "sym_min": min,
    "sym_not": operator.not_, "sym_ite": lambda c, t, f: t if c else f,
}


def _prim(name: str) -> Kernel | None:
    if name == "et_view":
        return _et_view
    if name == "et_copy_index":
        return _et_copy_index
    fn = _PRIM.get(name)
    return _scalar(fn) if fn is not None else None


class _Param(NamedTuple):
    """How one schema argument is passed: by name or position, and what it may hold."""

    name: str
    keyword: bool
    optional: bool  # an absent `Tensor?` arrives as an empty placeholder tensor
    dtype: bool  # ExecuTorch stores a ScalarType as an int; Python kernels want a torch.dtype
    out: bool


def _params(schema) -> list[_Param]:
    return [_Param(a.name, a.kwarg_only, isinstance(a.type, torch.OptionalType),
                   "ScalarType" in str(a.real_type), a.is_out) for a in schema.arguments]


def _bind(params: list[_Param], frame: Frame, args: Sequence[int], skip_out: bool = False,
          replace: dict | None = None):
    """Positional and keyword arguments of a call; ``replace`` swaps the values of some
    parameters (by position) for others."""
    positional, keywords = [], {}
    replace = replace or {}
    for k, (param, index) in enumerate(zip(params, args)):
        if skip_out and param.out:
            continue
        value = replace[k] if k in replace else frame.read(index, param.optional)
        if param.dtype and isinstance(value, int):
            value = dtype_of(value)
        if param.keyword:
            keywords[param.name] = value
        else:
            positional.append(value)
    return positional, keywords


def _has_kernel(op: torch._ops.OpOverload) -> bool:
    return any(op.has_kernel_for_dispatch_key(key) for key in (
        "CPU", "CompositeExplicitAutograd", "CompositeImplicitAutograd"))


def _functional_of(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The overload computing what an out-variant writes (same non-out arguments)."""
    wanted = [a.name for a in op._schema.arguments if not a.is_out]
    packet = op.overloadpacket
    for name in packet.overloads():
        candidate = getattr(packet, name)
        schema = candidate._schema
        if not schema.is_mutable and [a.name for a in schema.arguments] == wanted:
            return candidate
    return None


# Kernels that walk their input and output memory linearly, element by element (ExecuTorch's
# quantized op_quantize.cpp / op_dequantize.cpp): right only when both share one dim order.
MEMORY_LINEAR = {"quantized_decomposed::quantize_per_tensor",
                 "quantized_decomposed::dequantize_per_tensor"}


def _call(op: torch._ops.OpOverload) -> Kernel:
    params = _params(op._schema)
    outs = [i for i, p in enumerate(params) if p.out]
    linear = op._schema.name in MEMORY_LINEAR

    def run(frame: Frame, args: Sequence[int]) -> None:
        if not outs:
            positional, keywords = _bind(params, frame, args)
            _write_returns(frame, args[len(params):], op(*positional, **keywords))
            return
        if linear:
            _check_same_dim_order(op, frame, [args[0], *(args[i] for i in outs)])
        # The host kernel reads contiguous copies and fills fresh contiguous buffers, whose
        # values then go into the planned memory in its dim order: ExecuTorch's AOT builds of
        # the kernels walk memory as if every tensor were contiguous, and may re-stride `out`.
        scratch = {i: torch.empty(out.shape, dtype=out.dtype) for i in outs
                   if isinstance(out := frame.read(args[i]), torch.Tensor)}
        written = list(scratch)
        for k, (param, index) in enumerate(zip(params, args)):
            value = frame.read(index)
            if k not in scratch and isinstance(value, torch.Tensor) and \
                    not value.is_contiguous():
                scratch[k] = value.contiguous()
        positional, keywords = _bind(params, frame, args, replace=scratch)
        op(*positional, **keywords)
        for i in written:
            frame.write(args[i], scratch[i])
    return run


def _check_same_dim_order(op, frame: Frame, ids: Sequence[int]) -> None:
    orders = {frame.dim_order(i) for i in ids if isinstance(frame.read(i), torch.Tensor)}
    if len(orders) > 1:
        raise InvalidProgramError(
            f"{op._schema.name} reads and writes tensors of dim orders {sorted(orders)}; the "
            "device kernel walks memory linearly, so the board would compute a permuted result")


def _call_functional(op: torch._ops.OpOverload, functional: torch._ops.OpOverload) -> Kernel:
    params = _params(op._schema)
    outs = [i for i, p in enumerate(params) if p.out]

    def run(frame: Frame, args: Sequence[int]) -> None:
        positional, keywords = _bind(params, frame, args, skip_out=True)
        _write_returns(frame, [args[i] for i in outs], functional(*positional, **keywords))
    return run


def _write_returns(frame: Frame, ids: Sequence[int], result) -> None:
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(ids) == 1 and isinstance(frame.values[ids[0]], Boxed):
        ids = frame.values[ids[0]].ids  # several returns are boxed in one TensorList
    for index, value in zip(ids, results):
        frame.write(index, value)


def resolve(name: str, overload: str) -> Kernel:
    """The host kernel for operator `name` (`ns::op`) and `overload` ('' means default)."""
    label = f"{name}.{overload}" if overload else name
    namespace, _, op_name = name.partition("::")
    if namespace == "executorch_prim":
        kernel = _prim(op_name)
        if kernel is None:
            raise InvalidProgramError(f"operator {label} is not available on the host")
        return kernel
    try:
        _load_namespace(namespace)
        op = getattr(getattr(getattr(torch.ops, namespace), op_name), overload or "default")
    except (AttributeError, RuntimeError, ImportError) as exc:
        raise InvalidProgramError(f"operator {label} is not available on the host: {exc}") from exc
    if _has_kernel(op) or not any(a.is_out for a in op._schema.arguments):
        return _call(op)
    functional = _functional_of(op)
    if functional is None or not _has_kernel(functional):
        raise InvalidProgramError(f"operator {label} has no host implementation")
    return _call_functional(op, functional)
