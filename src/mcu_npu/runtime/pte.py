"""Host runtime for ExecuTorch .pte files: runs the serialized program itself, so a check on
the host checks the very bytes that go to the board.

ExecuTorch's own deserializer turns the file into its schema dataclasses; the execution plan's
values become torch tensors (constants from the file, the rest laid out in the planned memory
arenas) and its instructions run as torch ops and delegate emulators.
"""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple, Sequence

import torch

from ..device.delegate_calls import output_counts
from ..device.pte_file import envelope_problem, read_bytes
from ..errors import ConfigError, InputError, InvalidProgramError, McuNpuError
from .delegates import call_delegate
from .kernels import Boxed, Frame, dtype_of, resolve
from .structure import check_program


__all__ = ["InputSpec", "Program", "load"]


class InputSpec(NamedTuple):
    """What a method input must be: a tensor's shape and dtype, or a scalar's Python type."""

    shape: tuple[int, ...] | None
    dtype: torch.dtype | type


@contextlib.contextmanager
def _corrupt_as(what: str):
    """Report a failure while reading the program's structures as an InvalidProgramError."""
    try:
        yield
    except McuNpuError:
        raise
    except Exception as exc:  # a corrupt program breaks anywhere, with any exception type
        raise InvalidProgramError(f"{what}: {type(exc).__name__}: {exc}") from exc


def load(source, host_data: dict[str, bytes] | None = None) -> "Program":
    """Read a .pte program from bytes or a file path; ``host_data``: its companion's named
    data (the graphs behind vendor NPU payloads), see ``Program``."""
    return Program(read_bytes(source), host_data)


def _deserialize(data: bytes):
    problem = envelope_problem(data)
    if problem is not None:
        raise InvalidProgramError(problem)
    from ..upstream.private import deserialize_pte_binary

    try:
        pte = deserialize_pte_binary(data)
    except Exception as exc:  # flatbuffers and struct raise many types on corrupt data
        raise InvalidProgramError(
            f"cannot parse the program: {type(exc).__name__}: {exc}") from exc
    if not pte.program.execution_plan:
        raise InvalidProgramError("the program has no methods")
    with _corrupt_as("the program is corrupt"):
        check_program(pte)  # before any runtime, the host's or ExecuTorch's, uses it
    return pte


def _named_data(pte) -> dict[str, bytes]:
    store = pte.named_data
    if store is None:
        return {}
    return {key: _as_bytes(store.buffers[entry.buffer_index])
            for key, entry in store.pte_data.items()}


def _as_bytes(buffer) -> bytes:
    if isinstance(buffer, (bytes, bytearray, memoryview)):
        return bytes(buffer)
    return buffer.to_bytes()  # file-backed data


class Program:
    """A deserialized .pte program; `run` executes one of its methods on the host.

    ``named_data`` is the program's own named data and, after it, ``host_data``: what its
    companion file holds for the host (``firmware.companion``), which the delegate emulators
    look up like named data; the device runtime has only the former."""

    def __init__(self, data: bytes, host_data: dict[str, bytes] | None = None):
        self._pte = _deserialize(data)
        self.data = bytes(data)
        """The program's bytes, as read."""
        self.size = len(data)
        self.identifier = bytes(data[4:8]).decode("ascii", "replace")
        """The schema's file identifier the program carries (``ET12``)."""
        with _corrupt_as("the program is corrupt"):
            self._plans = {plan.name: plan for plan in self._pte.program.execution_plan}
            self.device_named_data: dict[str, bytes] = _named_data(self._pte)
            self.named_data: dict[str, bytes] = {**self.device_named_data, **(host_data or {})}
            self.backend_ids: list[str] = list(dict.fromkeys(
                d.id for plan in self._plans.values() for d in plan.delegates))
        self._methods: dict[str, Method] = {}

    @property
    def method_names(self) -> list[str]:
        return list(self._plans)

    @property
    def operator_names(self) -> list[str]:
        """The kernels the program calls (``ns::op``), over all methods."""
        return list(dict.fromkeys(op.name for plan in self._plans.values()
                                  for op in plan.operators))

    @property
    def kernel_names(self) -> list[str]:
        """The kernels the program calls as runtime registries name them
        (``ns::op.overload``), over all methods."""
        return list(dict.fromkeys(f"{op.name}.{op.overload}" if op.overload else op.name
                                  for plan in self._plans.values() for op in plan.operators))

    @property
    def input_specs(self) -> list[InputSpec]:
        """Shape and dtype of each input of the default method."""
        return self.input_specs_of(self._default_method())

    def input_specs_of(self, method: str) -> list[InputSpec]:
        plan = self._plan(method)
        with _corrupt_as(f"the inputs of method '{method}' are corrupt"):
            return [InputSpec(*input_spec(plan.values[i].val)) for i in plan.inputs]

    def input_dim_orders_of(self, method: str) -> list[tuple[int, ...] | None]:
        """The dim order of each tensor input of ``method`` (None for a scalar input)."""
        plan = self._plan(method)
        return [tuple(int(d) for d in plan.values[i].val.dim_order)
                if type(plan.values[i].val).__name__ == "Tensor" else None
                for i in plan.inputs]

    def run(self, *inputs, method: str = "forward", observer=None) -> list[torch.Tensor]:
        """Execute `method` on `inputs`; the outputs are fresh tensors, not runtime memory.
        ``observer(method, chain, pc, instruction)`` is called after each instruction (the
        event tracer's place: ``devtools.etdump``)."""
        check_inputs(method, self.input_specs_of(method), inputs)
        if method not in self._methods:
            with _corrupt_as(f"cannot prepare method '{method}'"):
                self._methods[method] = Method(self._pte, self._plan(method), self.named_data)
        with torch.no_grad():
            return self._methods[method].run(inputs, observer)

    def reset_state(self) -> None:
        """Put every mutable buffer (a model's state) back to the value the program stores
        for it: the next ``run`` starts as the first did. A loaded method keeps its buffers
        between runs, as ExecuTorch's runtime does."""
        self._methods.clear()

    def _default_method(self) -> str:
        return "forward" if "forward" in self._plans else next(iter(self._plans))

    def _plan(self, method: str):
        try:
            return self._plans[method]
        except KeyError:
            raise ConfigError(
                f"the program has no method '{method}' (it has: {', '.join(self._plans)})"
            ) from None

    def __repr__(self) -> str:
        return f"Program(methods={self.method_names}, backends={self.backend_ids})"


def check_inputs(method: str, specs: Sequence[InputSpec], inputs: Sequence) -> None:
    """InputError unless ``inputs`` are what ``specs`` (a method's inputs) ask for."""
    if len(inputs) != len(specs):
        raise InputError(
            f"method '{method}' takes {len(specs)} input{'s' * (len(specs) != 1)} "
            f"but {len(inputs)} {'was' if len(inputs) == 1 else 'were'} given")
    for i, (spec, value) in enumerate(zip(specs, inputs)):
        if spec.shape is None:
            if not isinstance(value, spec.dtype):
                raise InputError(f"input {i} is a {type(value).__name__} but the program "
                                 f"expects a {spec.dtype.__name__}")
            continue
        if not isinstance(value, torch.Tensor):
            raise InputError(f"input {i} is a {type(value).__name__} but the program expects "
                             f"a tensor of shape {spec.shape}")
        if value.dtype != spec.dtype:
            raise InputError(f"input {i} has dtype {value.dtype} but the program expects "
                             f"{spec.dtype}")
        if tuple(value.shape) != spec.shape:
            raise InputError(f"input {i} has shape {tuple(value.shape)} but the program expects "
                             f"{spec.shape}")


_SCALARS = {"Int": int, "Double": float, "Bool": bool, "String": str, "Null": type(None)}


def input_spec(val) -> tuple:
    """(shape, dtype) of a tensor input value, (None, Python type) of a scalar one."""
    kind = type(val).__name__
    if kind == "Tensor":
        return tuple(val.sizes), dtype_of(val.scalar_type)
    if kind in _SCALARS:
        return None, _SCALARS[kind]
    raise InvalidProgramError(f"the program takes a {kind} input, which the host cannot feed")


class Method:
    """One execution plan made runnable: its values live in torch tensors and arenas."""

    def __init__(self, pte, plan, named_data: dict[str, bytes]):
        self._program, self._plan, self._named_data = pte.program, plan, named_data
        self._kernels = [resolve(op.name, op.overload) for op in plan.operators]
        self.frame = _materialize(pte, plan)
        self._n_outputs = output_counts(plan)

    def run(self, inputs: Sequence, observer=None) -> list[torch.Tensor]:
        for index, value in zip(self._plan.inputs, inputs):
            current = self.frame.values[index]
            if isinstance(current, torch.Tensor):
                current.copy_(value)
            else:
                self.frame.values[index] = value
        for c, chain in enumerate(self._plan.chains):
            self._run_chain(c, chain.instructions, observer)
        return [_output(self.frame.read(i)) for i in self._plan.outputs]

    def _run_chain(self, c: int, instructions, observer=None) -> None:
        pc = 0
        while pc < len(instructions):
            call = instructions[pc].instr_args
            try:
                following = self._step(c, pc, call)
            except McuNpuError:
                raise
            except Exception as exc:
                raise InvalidProgramError(
                    f"instruction {pc} of method '{self._plan.name}' ({self._describe(call)}) "
                    f"failed on the host: {type(exc).__name__}: {exc}") from exc
            if observer is not None:
                observer(self, c, pc, call)
            pc = following

    def _step(self, c: int, pc: int, call) -> int:
        kind = type(call).__name__
        if kind == "KernelCall":
            self._kernels[call.op_index](self.frame, call.args)
        elif kind == "DelegateCall":
            delegate = self._plan.delegates[call.delegate_index]
            processed = self._program.backend_delegate_data[delegate.processed.index].data
            call_delegate(delegate, processed, self._named_data, self.frame, call.args,
                          self._n_outputs[c, pc])
        elif kind == "MoveCall":
            self.frame.values[call.move_to] = self.frame.values[call.move_from]
        elif kind == "JumpFalseCall":
            if not self.frame.read(call.cond_value_index):
                return call.destination_instruction
        elif kind != "FreeCall":
            raise InvalidProgramError(f"unknown instruction {kind}")
        return pc + 1

    def _describe(self, call) -> str:
        kind = type(call).__name__
        with contextlib.suppress(Exception):
            if kind == "KernelCall":
                op = self._plan.operators[call.op_index]
                return f"{op.name}.{op.overload}" if op.overload else op.name
            if kind == "DelegateCall":
                return f"delegate '{self._plan.delegates[call.delegate_index].id}'"
        return kind


def _output(value) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.clone()
    return torch.tensor(value)


def _materialize(pte, plan) -> Frame:
    """Build every value of `plan`: planned tensors are views into fresh memory arenas."""
    arenas = [torch.zeros(size, dtype=torch.uint8) for size in plan.non_const_buffer_sizes]
    values, none_ids, dim_orders = [], set(), {}
    for index, evalue in enumerate(plan.values):
        val = evalue.val
        kind = type(val).__name__
        if kind == "Tensor":
            values.append(_tensor(val, index, pte, arenas))
            dim_orders[index] = tuple(int(d) for d in val.dim_order)
            if val.allocation_info is None and val.data_buffer_idx == 0 and list(val.sizes) == [0]:
                none_ids.add(index)
        elif kind in _BOXED:
            values.append(Boxed(_BOXED[kind], tuple(val.items)))
        elif kind in ("BoolList", "DoubleList"):
            values.append([_scalar(kind[:-4], v) for v in val.items])
        elif kind in _SCALARS:
            values.append(_scalar(kind, getattr(val, f"{kind.lower()}_val", None)))
        else:
            raise InvalidProgramError(f"value {index} has a type the host cannot hold: {kind}")
    return Frame(values, none_ids, dim_orders)


_BOXED = {"IntList": "int", "TensorList": "tensor", "OptionalTensorList": "optional"}


def _scalar(kind: str, raw):
    return None if kind == "Null" else _SCALARS[kind](raw)


def _tensor(t, index: int, pte, arenas: list[torch.Tensor]) -> torch.Tensor:
    dtype, what = dtype_of(t.scalar_type), f"tensor value {index}"
    info = t.extra_tensor_info
    if info is not None and int(info.location) == 1:  # TensorDataLocation.EXTERNAL
        raise InvalidProgramError(f"{what} ({info.fully_qualified_name}) lives in an external "
                                  "data file, which the host runtime does not load")
    if t.allocation_info is not None:
        memory_id = t.allocation_info.memory_id
        if not 0 < memory_id < len(arenas):
            raise InvalidProgramError(f"{what} is planned in memory {memory_id}, which the "
                                      "program does not declare")
        tensor = _lay_out(arenas[memory_id], t.allocation_info.memory_offset, dtype, t, what)
        if t.data_buffer_idx > 0 and pte.mutable_data:  # a mutable buffer's initial state
            initial = _raw(pte.mutable_data, t.data_buffer_idx, what)
            tensor.copy_(_lay_out(initial, 0, dtype, t, what))
        return tensor
    if t.data_buffer_idx > 0:
        constant = _raw(pte.program.constant_buffer, t.data_buffer_idx, what)
        return _lay_out(constant, 0, dtype, t, what)
    return _lay_out(torch.zeros(_nbytes(dtype, t), dtype=torch.uint8), 0, dtype, t, what)


def _raw(buffers, index: int, what: str) -> torch.Tensor:
    if index >= len(buffers):
        raise InvalidProgramError(f"{what} refers to data buffer {index}, the program has "
                                  f"{len(buffers)}")
    storage = bytearray(buffers[index].storage)
    if not storage:
        return torch.zeros(0, dtype=torch.uint8)
    return torch.frombuffer(storage, dtype=torch.uint8)


def _nbytes(dtype: torch.dtype, t) -> int:
    return math.prod(t.sizes) * dtype.itemsize


def _lay_out(raw: torch.Tensor, offset: int, dtype: torch.dtype, t, what: str) -> torch.Tensor:
    """The tensor `t` describes, over `raw` bytes from `offset`, in its dim order."""
    sizes, order, nbytes = list(t.sizes), list(t.dim_order), _nbytes(dtype, t)
    if sorted(order) != list(range(len(sizes))):
        raise InvalidProgramError(f"{what} has dim order {order} for {len(sizes)} dims")
    if offset + nbytes > raw.numel():
        raise InvalidProgramError(f"{what} needs bytes {offset}..{offset + nbytes} of a "
                                  f"{raw.numel()}-byte buffer")
    if offset % dtype.itemsize:
        raise InvalidProgramError(f"{what} is misaligned: offset {offset} for {dtype}")
    physical = raw[offset:offset + nbytes].view(dtype).view([sizes[d] for d in order])
    return physical.permute([order.index(d) for d in range(len(order))])
