"""The registry of delegate emulators: host functions that stand in for a backend's runtime.

An emulator receives what the board's backend receives (the processed payload, the compile
specs, the program's named data and the call's inputs) and returns the call's outputs.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..errors import InvalidProgramError

Emulator = Callable[
    [bytes, "list[tuple[str, bytes]]", "dict[str, bytes]", "list[torch.Tensor]"],
    "list[torch.Tensor]",
]

_EMULATORS: dict[str, Emulator] = {}


def register_emulator(backend_id: str, fn: Emulator) -> None:
    """Make `fn` run the delegate calls of backend `backend_id` on the host.

    Registering the same function again is a no-op; a different one for a taken id is refused.
    """
    if not callable(fn):
        raise TypeError(f"the emulator of backend '{backend_id}' must be callable")
    current = _EMULATORS.get(backend_id)
    if current is not None and current is not fn:
        raise ValueError(f"backend '{backend_id}' already has an emulator: {current!r}")
    _EMULATORS[backend_id] = fn


def unregister_emulator(backend_id: str) -> None:
    """Forget the emulator of `backend_id` (no error if there is none)."""
    _EMULATORS.pop(backend_id, None)


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


def output_counts(plan) -> dict[tuple[int, int], int]:
    """How many trailing args of each DelegateCall, keyed by (chain, instruction), are outputs.

    The .pte does not record it. A delegate's results are fresh values that nothing has
    written yet, while its inputs were loaded or computed before the call.
    """
    written = set(plan.inputs) | _preset_values(plan)
    counts = {}
    for c, chain in enumerate(plan.chains):
        for pc, instruction in enumerate(chain.instructions):
            call = instruction.instr_args
            kind = type(call).__name__
            if kind == "DelegateCall":
                trailing = 0
                for arg in reversed(call.args):
                    if arg in written:
                        break
                    trailing += 1
                counts[c, pc] = trailing
                written.update(call.args)
            elif kind == "KernelCall":
                written.update(call.args)
            elif kind == "MoveCall":
                written.add(call.move_to)
    return counts


def _preset_values(plan) -> set[int]:
    """Values that hold data before any instruction: scalars, lists, constant tensors."""
    return {i for i, evalue in enumerate(plan.values)
            if type(evalue.val).__name__ != "Tensor" or evalue.val.data_buffer_idx > 0
            or (evalue.val.allocation_info is None and list(evalue.val.sizes) == [0])}


def call_delegate(delegate, processed: bytes, named_data: dict[str, bytes], frame, args,
                  n_outputs: int) -> None:
    """Run one DelegateCall through its backend's emulator and store the results."""
    emulator = get_emulator(delegate.id)
    split = len(args) - n_outputs
    inputs = [frame.read(i) for i in args[:split]]
    specs = [(spec.key, bytes(spec.value)) for spec in delegate.compile_specs]
    outputs = list(emulator(bytes(processed), specs, named_data, inputs))
    if len(outputs) != n_outputs:
        raise InvalidProgramError(
            f"the emulator of backend '{delegate.id}' returned {len(outputs)} outputs for a call "
            f"with {len(inputs)} inputs; the program expects {n_outputs}")
    for k, (index, value) in enumerate(zip(args[split:], outputs)):
        value = torch.as_tensor(value)
        expected = frame.values[index]
        if isinstance(expected, torch.Tensor) and (
                value.shape != expected.shape or value.dtype != expected.dtype):
            raise InvalidProgramError(
                f"output {k} of the '{delegate.id}' delegate is {tuple(value.shape)} "
                f"{value.dtype}; the program expects {tuple(expected.shape)} {expected.dtype}")
        frame.write(index, value)
