"""How the device runtime splits a delegate call's arguments into inputs and outputs, read
from the program and the payload alone (no torch), for the host runtime and ``mcu-npu check``.

The ``.pte`` does not record the split. ``EthosUBackend.cpp`` and ``NeutronBackend.cpp`` read
the input count from the payload (``npu.ethos_u.payload.input_count``,
``npu.neutron.payload.input_count``); for any other backend it is inferred from the program
(``output_counts``). ``plan`` is an execution plan as ExecuTorch's deserializer or
``firmware.tables`` gives it (the schema's field names).
"""

from __future__ import annotations


def output_counts(plan) -> dict[tuple[int, int], int]:
    """How many trailing args of each DelegateCall, keyed by (chain, instruction), are outputs.

    A delegate's results are fresh values that nothing has written yet, while its inputs
    were loaded or computed before the call.
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


def delegate_instructions(plan):
    """Each DelegateCall of ``plan`` in program order, as (chain, instruction index, the call,
    its delegate, how many of its trailing args are outputs)."""
    counts = output_counts(plan)
    for c, chain in enumerate(plan.chains):
        for pc, instruction in enumerate(chain.instructions):
            call = instruction.instr_args
            if type(call).__name__ == "DelegateCall":
                yield c, pc, call, plan.delegates[call.delegate_index], counts[c, pc]


def _preset_values(plan) -> set[int]:
    """Values that hold data before any instruction: scalars, lists, constant tensors."""
    return {i for i, evalue in enumerate(plan.values)
            if type(evalue.val).__name__ != "Tensor" or evalue.val.data_buffer_idx > 0
            or (evalue.val.allocation_info is None and list(evalue.val.sizes) == [0])}


def input_split(backend_id: str, processed: bytes, named_data: dict[str, bytes], n_args: int,
                n_outputs: int, counts: dict) -> int:
    """How many leading arguments of a delegate call are its inputs: the count the device
    runtime reads from the payload (``counts``: backend id -> (payload, named data) -> input
    count, e.g. ``npu.neutron.payload.input_count``), else the program-inferred split
    (``n_outputs``, from ``output_counts``)."""
    count = counts.get(backend_id)
    if count is not None:
        return min(count(bytes(processed), named_data), n_args)
    return n_args - n_outputs
