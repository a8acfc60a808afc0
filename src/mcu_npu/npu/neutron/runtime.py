"""What the eIQ Neutron device runtime (``NeutronBackend``) reads, for the report's versions
record and ``mcu-npu check``."""

from __future__ import annotations

from . import payload as nxp


def runtime_record(payloads: list[bytes]) -> dict:
    """The runtime, the payload format it must read and the payload versions in
    ``payloads``."""
    versions = sorted({nxp.parse(p).version for p in payloads})
    return {"runtime": "NeutronBackend",
            "delegate_payload": "Neutron payload (NeutronBackend.cpp header, microcode "
                                f"magic {nxp.MAGIC:#010x})",
            "neutron_payload_versions": versions}
