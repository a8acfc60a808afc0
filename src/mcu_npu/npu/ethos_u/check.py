"""What the Ethos-U runtime and driver check of a payload before running it, for
``mcu-npu check``: that it is a Vela bin stream, and that its command stream was compiled
for the board's NPU (architecture and MACs per cycle)."""

from __future__ import annotations

import struct

from ...errors import InvalidProgramError
from . import payload as bin_stream


def ethos_u_config(cmd_data: bytes) -> tuple[int, int] | None:
    """(architecture major revision, MACs per cycle) of the NPU a Vela command stream was
    compiled for, from its driver-actions header (``COP1``, Config tag, config word, id
    word), which the Ethos-U driver checks against the hardware; None when absent."""
    if len(cmd_data) < 16 or cmd_data[:4] not in (b"COP1", b"COP2"):
        return None
    config, ident = struct.unpack_from("<II", cmd_data, 8)
    return ident >> 28, 1 << (config & 0xF)


def _architecture(target) -> int:
    """Architecture major revision of the target's Ethos-U: 2 for the U85, 1 before it."""
    accelerator = target.npu.vela.accelerator if target.npu.vela else ""
    return 2 if accelerator.startswith("ethos-u85") else 1


def payload_problems(data: bytes, inputs, outputs, target=None) -> list[str]:
    """Where the Ethos-U runtime (or its driver, for ``target``'s NPU) would refuse this
    payload; its I/O records are checked with the other families' (``NpuFamily``)."""
    try:
        stream = bin_stream.parse(data)
    except InvalidProgramError as exc:
        return [f"not a Vela bin stream: {exc}"]
    config = ethos_u_config(stream.cmd_data)
    if target is None or config is None:
        return []
    arch, macs = config
    want = (_architecture(target), target.npu.macs_per_cycle)
    if (arch, macs) == want:
        return []
    return [f"compiled for an Ethos-U of architecture {arch}.x with {macs} MACs per cycle; "
            f"target {target.name} has {target.npu.name} (architecture {want[0]}.x, {want[1]} "
            "MACs per cycle)"]
