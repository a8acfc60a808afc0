"""What the Ethos-U device runtime (``EthosUBackend``) reads, for the report's versions record
and ``mcu-npu check``."""

from __future__ import annotations


def runtime_record(payloads: list[bytes]) -> dict:
    """The runtime and the payload format it must read (``payloads``: Vela bin streams)."""
    return {"runtime": "EthosUBackend",
            "delegate_payload": "Vela bin stream (vela_bin_stream ... vela_end_stream "
                                "blocks, command stream COP1/COP2)"}
