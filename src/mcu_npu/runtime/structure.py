"""Structural validation of a deserialized program: every index a method holds (operators,
values, delegates, data buffers, jump targets) points inside its table, every tensor's sizes,
dim order and memory fit, every kernel call's arguments are of its schema's kinds and the
window values that bound a convolution's or pooling's loops are in range, before either
runtime uses the program.

ExecuTorch's C++ runtime trusts much of this (a kernel call past the operator table loads
with a log line and crashes the process in ``execute``), so a program reaches it only
after ``check_program`` passed; the host runtime refuses the same programs the same way.
"""

from __future__ import annotations

import functools
import math

from ..errors import InvalidProgramError
from .kernels import dtype_of

MAX_BYTES = 1 << 30
"""The most bytes a memory pool or a tensor may take: more than any microcontroller has; a
larger size is a damaged program (both runtimes would allocate it)."""
MAX_DIMS = 16
"""ExecuTorch's ``kTensorDimensionLimit``: the most dims a runtime tensor may have."""
_VALUE_KINDS = {"Tensor", "Int", "Double", "Bool", "String", "Null", "IntList", "DoubleList",
                "BoolList", "TensorList", "OptionalTensorList"}


def check_program(pte) -> None:
    """InvalidProgramError naming the first structural fault of ``pte`` (a ``PTEFile``)."""
    program = pte.program
    delegate_data = len(program.backend_delegate_data)
    for plan in program.execution_plan:
        if not isinstance(plan.name, str):
            raise InvalidProgramError("the program has a method without a name")
        method = f"method '{plan.name}'"
        if any(not 0 <= int(size) <= MAX_BYTES for size in plan.non_const_buffer_sizes):
            raise InvalidProgramError(f"{method} declares memory pools of "
                                      f"{list(plan.non_const_buffer_sizes)} bytes (at most "
                                      f"{MAX_BYTES} each)")
        if not plan.chains:
            raise InvalidProgramError(f"{method} has no instructions (no chain)")
        n = len(plan.values)
        for index, evalue in enumerate(plan.values):
            _check_value(pte, plan, index, evalue.val, f"{method}, value {index}")
        _indices(plan.inputs, n, f"{method}: an input")
        _indices(plan.outputs, n, f"{method}: an output")
        for op in plan.operators:
            if not isinstance(op.name, str) or not op.name or not isinstance(op.overload, str):
                raise InvalidProgramError(f"{method} has an operator without a name")
        for d, delegate in enumerate(plan.delegates):
            if not isinstance(delegate.id, str) or not delegate.id or any(
                    not isinstance(spec.key, str) or spec.value is None
                    for spec in delegate.compile_specs or ()):
                raise InvalidProgramError(f"{method}: delegate {d} has no backend name, or a "
                                          "compile spec without key or value")
            ref = delegate.processed
            if int(ref.location) != 0 or not 0 <= ref.index < delegate_data:
                raise InvalidProgramError(
                    f"{method}: delegate {d} ({delegate.id}) refers to payload {ref.index}, "
                    f"the program has {delegate_data}")
        for c, chain in enumerate(plan.chains):
            _indices(chain.inputs, n, f"{method}, chain {c}: an input")
            _indices(chain.outputs, n, f"{method}, chain {c}: an output")
            for pc, instruction in enumerate(chain.instructions):
                _check_instruction(plan, instruction.instr_args, len(chain.instructions),
                                   f"{method}, instruction {pc}")


def _indices(items, n: int, what: str, allow_none: bool = False) -> None:
    for i in items:
        if not (-1 if allow_none else 0) <= i < n:
            raise InvalidProgramError(f"{what} refers to value {i}, the method has {n}")


def _check_instruction(plan, call, length: int, where: str) -> None:
    kind, n = type(call).__name__, len(plan.values)
    if kind == "KernelCall":
        if not 0 <= call.op_index < len(plan.operators):
            raise InvalidProgramError(f"{where} calls operator {call.op_index}, the method has "
                                      f"{len(plan.operators)}")
        _indices(call.args, n, f"{where}: an argument")
        _check_kernel_args(plan, call, where)
    elif kind == "DelegateCall":
        if not 0 <= call.delegate_index < len(plan.delegates):
            raise InvalidProgramError(f"{where} calls delegate {call.delegate_index}, the "
                                      f"method has {len(plan.delegates)}")
        _indices(call.args, n, f"{where}: an argument")
    elif kind == "MoveCall":
        _indices((call.move_from, call.move_to), n, f"{where}: a move")
    elif kind == "JumpFalseCall":
        _indices((call.cond_value_index,), n, f"{where}: a jump condition")
        if not 0 <= call.destination_instruction <= length:
            raise InvalidProgramError(f"{where} jumps to instruction "
                                      f"{call.destination_instruction}, the chain has {length}")
    elif kind == "FreeCall":
        _indices((call.value_index,), n, f"{where}: a free")
    else:
        raise InvalidProgramError(f"{where} is an unknown instruction {kind}")


def _check_value(pte, plan, index: int, val, what: str) -> None:
    kind, n = type(val).__name__, len(plan.values)
    if kind not in _VALUE_KINDS:
        raise InvalidProgramError(f"{what} has an unknown type {kind}")
    if kind == "String" and not isinstance(val.string_val, str):
        raise InvalidProgramError(f"{what} is a string without characters")
    if kind == "IntList":
        _indices(val.items, n, f"{what} (an int list)")
        if any(type(plan.values[i].val).__name__ != "Int" for i in val.items):
            raise InvalidProgramError(f"{what} (an int list) refers to a value that is not "
                                      "an int")
    elif kind in ("TensorList", "OptionalTensorList"):
        _indices(val.items, n, f"{what} (a tensor list)", allow_none=kind != "TensorList")
        allowed = {"Tensor"} if kind == "TensorList" else {"Tensor", "Null"}
        if any(i >= 0 and type(plan.values[i].val).__name__ not in allowed for i in val.items):
            raise InvalidProgramError(f"{what} (a tensor list) refers to a value that is not "
                                      "a tensor")
    elif kind == "Tensor":
        _check_tensor(pte, plan, val, what)


def _check_tensor(pte, plan, t, what: str) -> None:
    dtype = dtype_of(t.scalar_type)
    sizes, order = [int(s) for s in t.sizes], [int(d) for d in t.dim_order]
    if len(sizes) > MAX_DIMS or any(s < 0 for s in sizes):
        raise InvalidProgramError(f"{what} has sizes {sizes}")
    if sorted(order) != list(range(len(sizes))):
        raise InvalidProgramError(f"{what} has dim order {order} for {len(sizes)} dims")
    nbytes = math.prod(sizes) * dtype.itemsize
    if nbytes > MAX_BYTES:
        raise InvalidProgramError(f"{what} has sizes {sizes}: {nbytes} bytes (at most "
                                  f"{MAX_BYTES})")
    info = t.allocation_info
    if info is not None:
        memory = plan.non_const_buffer_sizes
        if not 0 < info.memory_id < len(memory):
            raise InvalidProgramError(f"{what} is planned in memory {info.memory_id}, the "
                                      f"method declares {len(memory)}")
        if info.memory_offset + nbytes > memory[info.memory_id]:
            raise InvalidProgramError(
                f"{what} needs bytes {info.memory_offset}..{info.memory_offset + nbytes} of "
                f"memory {info.memory_id}, which has {memory[info.memory_id]}")
        return
    extra = t.extra_tensor_info
    if t.data_buffer_idx > 0 and (extra is None or int(extra.location) != 1):
        buffers = pte.program.constant_buffer
        if t.data_buffer_idx >= len(buffers):
            raise InvalidProgramError(f"{what} refers to constant {t.data_buffer_idx}, the "
                                      f"program has {len(buffers)}")
        if nbytes > len(buffers[t.data_buffer_idx].storage):
            raise InvalidProgramError(f"{what} needs {nbytes} bytes of constant "
                                      f"{t.data_buffer_idx}, which has "
                                      f"{len(buffers[t.data_buffer_idx].storage)}")


def _check_kernel_args(plan, call, where: str) -> None:
    """The arguments of a kernel call are what its operator's schema takes, in number and
    kind (ExecuTorch's kernels abort the process on a value of the wrong kind): each
    argument, then the result (several results as one tensor list)."""
    op = plan.operators[call.op_index]
    schema = _schema(op.name, op.overload)
    if schema is None:  # not a torch operator: the kernel's own checks apply
        return
    expected = [_kinds(a.type) for a in schema.arguments]
    if len(schema.returns) == 1:
        expected.append(_kinds(schema.returns[0].type))
    elif schema.returns:
        expected.append({"TensorList"})
    elif len(call.args) == len(expected) + 1:  # an out variant returning nothing: its out
        expected.append(expected[-1] if schema.arguments else None)  # list again
    label = f"{op.name}.{op.overload}" if op.overload else op.name
    if len(call.args) != len(expected):
        raise InvalidProgramError(f"{where} calls {label} with {len(call.args)} arguments, "
                                  f"its schema takes {len(expected)}")
    for k, (index, kinds) in enumerate(zip(call.args, expected)):
        got = type(plan.values[index].val).__name__
        if kinds is not None and got not in kinds:
            raise InvalidProgramError(f"{where} passes a {got} as argument {k} of {label}, "
                                      f"which takes {' or '.join(sorted(kinds))}")
    _check_window_args(plan, call, schema, label, where)


_LEAST = {"kernel_size": 1, "stride": 1, "dilation": 1, "padding": 0, "output_padding": 0}
"""The least value of each item of the window arguments a convolution or pooling kernel
takes (its loop bounds); the most is ``MAX_BYTES``."""


def _check_window_args(plan, call, schema, label: str, where: str) -> None:
    """The values of a kernel's window arguments (``kernel_size``, ``stride``, ``padding``,
    ``dilation``, ``output_padding``) are in range, and a pooling window fits its padded
    input: a damaged value makes a portable kernel loop for minutes (a flipped kernel size),
    divide by zero (a zero stride) or read past its input (a negative one)."""
    names = {a.name for a in schema.arguments}
    if not {"stride", "padding"} <= names:  # not a convolution or pooling (as_strided's stride)
        return
    lists = {}
    for arg, index in zip(schema.arguments, call.args):
        val = plan.values[index].val
        if arg.name in _LEAST and type(val).__name__ == "IntList":
            items = [int(plan.values[i].val.int_val) for i in val.items]
            least = _LEAST[arg.name]
            if any(not least <= v <= MAX_BYTES for v in items):
                raise InvalidProgramError(f"{where} passes {arg.name} {items} to {label}, "
                                          f"whose items must be {least} to {MAX_BYTES}")
            lists[arg.name] = items
    kernel = lists.get("kernel_size")
    if kernel and "pool" in label:
        ceil = any(a.name == "ceil_mode" and type(plan.values[i].val).__name__ == "Bool" and
                   plan.values[i].val.bool_val for a, i in zip(schema.arguments, call.args))
        _check_pool_window(plan, call, lists, ceil, label, where)


def _check_pool_window(plan, call, lists: dict, ceil: bool, label: str, where: str) -> None:
    """A pooling's padding is at most half its kernel size, and its window gives at least
    one output along each spatial dim of the input (PyTorch's output size, ``ceil`` mode
    included), as PyTorch and ExecuTorch's portable kernels require."""
    kernel = lists["kernel_size"]
    tensor = next((plan.values[i].val for i in call.args
                   if type(plan.values[i].val).__name__ == "Tensor"), None)
    n = len(kernel)
    sizes = [int(x) for x in tensor.sizes] if tensor is not None else []
    if len(sizes) < n + 1:
        raise InvalidProgramError(f"{where} passes a {n}-D kernel_size to {label} for an "
                                  f"input of sizes {sizes}")
    first = 1 if "nhwc" in label else len(sizes) - n
    for name in ("stride", "padding", "dilation"):
        if len(lists.get(name) or [0]) not in (1, n):
            raise InvalidProgramError(f"{where} passes {name} {lists[name]} to {label} with "
                                      f"a {n}-D kernel_size: it takes 1 or {n} items")

    def item(name: str, d: int, default: int) -> int:
        values = lists.get(name) or [default]
        return values[d] if len(values) > 1 else values[0]

    for d in range(n):
        span = item("dilation", d, 1) * (kernel[d] - 1) + 1
        pad, stride, size = item("padding", d, 0), item("stride", d, kernel[d]), sizes[first + d]
        room = size + 2 * pad - span + (stride - 1 if ceil else 0)
        outputs = room // stride + 1 if room >= 0 else 0
        if ceil and outputs and (outputs - 1) * stride >= size + pad:
            outputs -= 1  # the last window would start in the padding
        if pad > kernel[d] // 2 or outputs < 1:
            raise InvalidProgramError(
                f"{where} passes kernel_size {kernel}, stride {lists.get('stride')}, padding "
                f"{lists.get('padding')} and dilation {lists.get('dilation')} to {label} for "
                f"an input of sizes {sizes}: along dim {first + d} the padding ({pad}) must "
                f"be at most half the kernel size and the window (spanning {span}) give an "
                f"output (it gives {outputs})")


@functools.lru_cache(maxsize=None)
def _schema(name: str, overload: str):
    """The torch schema of operator ``name`` (``ns::op``) and ``overload``; None when torch
    has no such operator."""
    import torch

    from .kernels import _load_namespace

    namespace, _, op_name = name.partition("::")
    try:
        _load_namespace(namespace)
        return getattr(getattr(getattr(torch.ops, namespace), op_name),
                       overload or "default")._schema
    except Exception:  # noqa: BLE001  (an unknown namespace, op or overload: no schema)
        return None


_SCALAR_KINDS = {"TensorType": "Tensor", "IntType": "Int", "SymIntType": "Int",
                 "FloatType": "Double", "SymFloatType": "Double", "BoolType": "Bool",
                 "SymBoolType": "Bool", "StringType": "String"}
_LIST_KINDS = {"Tensor": "TensorList", "Int": "IntList", "Double": "DoubleList",
               "Bool": "BoolList"}


def _kinds(jit_type) -> set[str] | None:
    """The value kinds ExecuTorch's emitter writes for an argument of ``jit_type``; None
    when any may be (a type it has no rule for here)."""
    kind = jit_type.kind()
    if kind == "OptionalType":
        inner = _kinds(jit_type.getElementType())
        return None if inner is None else inner | {"Null"}
    if kind in _SCALAR_KINDS:
        return {_SCALAR_KINDS[kind]}
    if kind == "NumberType":
        return {"Int", "Double", "Bool"}
    if kind == "ListType":
        element = jit_type.getElementType()
        if element.kind() == "OptionalType" and \
                element.getElementType().kind() == "TensorType":
            return {"OptionalTensorList"}
        inner = _kinds(element)
        if inner is None or len(inner) != 1 or next(iter(inner)) not in _LIST_KINDS:
            return None
        return {_LIST_KINDS[next(iter(inner))]}
    return None
