"""What the Ethos-U device runtime (``EthosUBackend``) reads, for the report's versions record
and memory figures."""

from __future__ import annotations

from ...device.sizes import align
from . import payload as bin_stream


def runtime_record(payloads: list[bytes]) -> dict:
    """The runtime and the payload format it must read (``payloads``: Vela bin streams)."""
    return {"runtime": "EthosUBackend",
            "delegate_payload": "Vela bin stream (vela_bin_stream ... vela_end_stream "
                                "blocks, command stream COP1/COP2)"}


def memory_figures(blob: bytes) -> dict:
    """Flash parts and per-call scratch of a Vela bin stream, as the runtime reads it: the
    weights and command stream in place, the scratch area 16-byte aligned."""
    stream = bin_stream.parse(blob)
    return {"weights": len(stream.weight_data), "commands": len(stream.cmd_data),
            "scratch": align(stream.scratch_size, 16), "estimated": False,
            "in_place": True, "formats": None}
