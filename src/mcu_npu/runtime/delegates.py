"""The registry of delegate emulators: host functions that stand in for a backend's runtime.

An emulator receives what the board's backend receives: the processed payload, the compile
specs, the program's named data and the call's tensors as ``DeviceTensor`` (sizes, dtype,
dim order and the bytes in memory order). It writes its results into the output tensors'
memory, as the device backend writes into the planned output buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np
import torch

from ..device.delegate_calls import delegate_instructions
from ..device.delegate_calls import input_split as split_by
from ..errors import InvalidProgramError


@dataclass(frozen=True)
class DeviceTensor:
    """A delegate argument as a device backend sees it: ``tensor`` is the value with its
    PyTorch sizes, laid out over planned memory in ``dim_order``."""

    tensor: torch.Tensor
    dim_order: tuple[int, ...]

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(self.tensor.shape)

    @property
    def nbytes(self) -> int:
        return self.tensor.numel() * self.tensor.element_size()

    def memory(self) -> np.ndarray:
        """The tensor's bytes as they lie in memory (its dim order), as a flat array."""
        return self.tensor.permute(self.dim_order).contiguous().reshape(-1).numpy()

    def write_memory(self, data: np.ndarray) -> None:
        """Copy ``data`` byte for byte into the tensor's memory (a device-side memcpy)."""
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if raw.size != self.nbytes:
            raise InvalidProgramError(f"a delegate wrote {raw.size} bytes into a "
                                      f"{self.nbytes}-byte output tensor")
        physical = self.tensor.permute(self.dim_order)
        flat = torch.from_numpy(raw.copy()).view(self.tensor.dtype)
        physical.copy_(flat.reshape(physical.shape))


Emulator = Callable[
    [bytes, "list[tuple[str, bytes]]", "dict[str, bytes]", "list[DeviceTensor]",
     "list[DeviceTensor]"],
    None,
]

_EMULATORS: dict[str, Emulator] = {}
_INPUT_COUNTS: dict[str, Callable[[bytes, dict], int]] = {}


def register_emulator(backend_id: str, fn: Emulator,
                      input_count: Callable[[bytes, dict], int] | None = None) -> None:
    """Make `fn` run the delegate calls of backend `backend_id` on the host. `input_count`
    (payload, named data) -> how many leading arguments of a call are inputs, as the device
    runtime reads it from the payload; without it the split is inferred from the program.

    Registering the same function again is a no-op; a different one for a taken id is refused.
    """
    if not callable(fn):
        raise TypeError(f"the emulator of backend '{backend_id}' must be callable")
    current = _EMULATORS.get(backend_id)
    if current is not None and current is not fn:
        raise ValueError(f"backend '{backend_id}' already has an emulator: {current!r}")
    _EMULATORS[backend_id] = fn
    if input_count is not None:
        _INPUT_COUNTS[backend_id] = input_count


def unregister_emulator(backend_id: str) -> None:
    """Forget the emulator of `backend_id` (no error if there is none)."""
    _EMULATORS.pop(backend_id, None)
    _INPUT_COUNTS.pop(backend_id, None)


def get_emulator(backend_id: str) -> Emulator:
    """The emulator registered for `backend_id`."""
    try:
        return _EMULATORS[backend_id]
    except KeyError:
        raise InvalidProgramError(
            f"the program delegates to backend '{backend_id}', which the host runtime cannot "
            "emulate (no emulator is registered for it)") from None


def registered_backends() -> list[str]:
    """The backend ids that have an emulator."""
    return sorted(_EMULATORS)


def input_split(backend_id: str, processed: bytes, named_data: dict[str, bytes], n_args: int,
                n_outputs: int) -> int:
    """How many leading arguments of a delegate call are its inputs, by the registered
    emulators' input counts (``device.delegate_calls.input_split``)."""
    return split_by(backend_id, processed, named_data, n_args, n_outputs, _INPUT_COUNTS)


class DelegateCallSite(NamedTuple):
    """One DelegateCall of an execution plan, its arguments split as the device splits
    them (value indices into the plan)."""

    chain: int
    pc: int
    delegate: object
    processed: bytes
    inputs: list[int]
    outputs: list[int]


def delegate_call_sites(program, plan, named_data: dict[str, bytes]) -> list[DelegateCallSite]:
    """Every DelegateCall of ``plan`` (of deserialized ``program``), in program order."""
    sites = []
    for c, pc, call, delegate, n_outputs in delegate_instructions(plan):
        processed = bytes(program.backend_delegate_data[delegate.processed.index].data)
        args = list(call.args)
        split = input_split(delegate.id, processed, named_data, len(args), n_outputs)
        sites.append(DelegateCallSite(c, pc, delegate, processed, args[:split], args[split:]))
    return sites


def call_delegate(delegate, processed: bytes, named_data: dict[str, bytes], frame, args,
                  n_outputs: int) -> None:
    """Run one DelegateCall through its backend's emulator, which writes the outputs."""
    emulator = get_emulator(delegate.id)
    split = input_split(delegate.id, processed, named_data, len(args), n_outputs)
    tensors = []
    for k, index in enumerate(args):
        value = frame.read(index)
        if not isinstance(value, torch.Tensor):
            raise InvalidProgramError(f"argument {k} of the '{delegate.id}' delegate call is a "
                                      f"{type(value).__name__}, not a tensor")
        tensors.append(DeviceTensor(value, frame.dim_order(index)))
    specs = [(spec.key, bytes(spec.value)) for spec in delegate.compile_specs]
    emulator(bytes(processed), specs, named_data, tensors[:split], tensors[split:])
