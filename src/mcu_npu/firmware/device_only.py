"""The report of a ``.pte`` read without its companion file: what the device program itself
says. The program keeps nothing of mcu-npu's own for this (flash is for what the board
reads); the target is in its delegates' compile specs, the NPU compiler and the device
runtime's expectations follow from the payloads, and ``load`` adds the kernels and the memory
read from the program."""

from __future__ import annotations

import json

from ..backend.compile_spec import KEY


def _payload(program, delegate) -> bytes:
    return bytes(program._pte.program.backend_delegate_data[delegate.processed.index].data)


def compiler_of(backend_id: str, payload: bytes) -> str:
    """The NPU compiler that wrote ``payload`` for a delegate of ``backend_id``: the
    reference compiler's container, else the vendor compiler of the backend's NPU family."""
    from ..device.payload import is_container
    from ..npu.families import family_of_backend

    if is_container(payload):
        return "reference"
    family = family_of_backend(backend_id)
    return "unknown" if family is None else family.compiler


def device_report(program):
    """The device-only report (``Report.device_only``) of ``program`` (a
    ``runtime.pte.Program``): target, one partition per NPU delegate with its compiler, the
    host-only flag and the versions the payloads imply; None when no delegate carries
    mcu-npu's compile spec (not a program of this project, or one without NPU partitions)."""
    from ..errors import InvalidProgramError
    from ..report import PartitionInfo, Report
    from ..targets import get_target
    from .deployability import runtime_expectations

    delegates = [d for plan in program._pte.program.execution_plan for d in plan.delegates]
    targets, memory = [], ""
    for d in delegates:
        for spec in d.compile_specs:
            if spec.key == KEY:
                try:
                    fields = json.loads(bytes(spec.value))
                    targets.append(fields["target"])
                    memory = fields.get("memory", memory)
                except (KeyError, TypeError, ValueError):
                    raise InvalidProgramError("a delegate's mcu-npu compile spec is corrupt") \
                        from None
    if not targets:
        return None
    payloads = [_payload(program, d) for d in delegates]
    compilers = [compiler_of(d.id, p) for d, p in zip(delegates, payloads)]
    target = targets[0]
    versions = {"pte_schema": program.identifier}
    try:
        versions.update(runtime_expectations(get_target(target), payloads))
    except Exception:  # noqa: BLE001  (an unknown target or a payload the parsers refuse)
        pass
    return Report(target=target, npu_compiler="+".join(dict.fromkeys(compilers)), ops=[],
                  partitions=[PartitionInfo(i, [], c, []) for i, c in enumerate(compilers)],
                  host_only="reference" in compilers, versions=versions, device_only=True,
                  placement={"memory": memory} if memory else {})
