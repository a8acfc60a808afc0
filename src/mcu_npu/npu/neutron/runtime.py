"""What the eIQ Neutron device runtime (``NeutronBackend``) reads, for the report's versions
record, memory figures and latency model."""

from __future__ import annotations

from ...device.sizes import POINTER, align
from . import payload as nxp


def runtime_record(payloads: list[bytes]) -> dict:
    """The runtime, the payload format it must read and the payload versions in
    ``payloads``."""
    versions = sorted({nxp.parse(p).version for p in payloads})
    return {"runtime": "NeutronBackend",
            "delegate_payload": "Neutron payload (NeutronBackend.cpp header, microcode "
                                f"magic {nxp.MAGIC:#010x})",
            "neutron_payload_versions": versions}


def memory_figures(blob: bytes) -> dict:
    """Flash parts and per-call scratch of a Neutron payload, as ``NeutronBackend.cpp``
    allocates it: the input and output pointer arrays (4-byte pointers on a Cortex-M) and
    the microcode's scratch, profile, debug and SRAM scratch areas, 16-byte aligned. Its
    format flags (``formats``) size the transpose buffers of each call."""
    fields = nxp.parse(blob)
    info = nxp.microcode_info(fields.microcode, fields.version)
    runs = (info.scratch_size, info.profile_size, info.debug_size, info.sram_scratch_size)
    pointers = align(POINTER * info.num_inputs) + align(POINTER * (info.num_outputs + 3))
    return {"weights": len(fields.weights),
            "commands": len(fields.microcode) + len(fields.kernels),
            "scratch": pointers + sum(align(n, 16) for n in runs), "estimated": False,
            "in_place": info.sram_scratch_size == 0,
            "formats": (fields.input_formats, fields.input_map, fields.output_formats,
                        fields.output_map, fields.num_input_args)}


def argument_formats(processed: bytes) -> tuple[list[int], list[int]] | None:
    """(input flags, output flags) in delegate argument order, from a Neutron or reference
    payload; None when the payload records none."""
    from ...device.payload import is_container, unpack_reference

    if is_container(processed):
        formats = unpack_reference(processed)[1].get("neutron_formats")
        return None if formats is None else (list(formats["inputs"]), list(formats["outputs"]))
    fields = nxp.parse(processed)
    ins = [0] * fields.num_input_args
    for flag, arg in zip(fields.input_formats, fields.input_map):
        ins[arg] = flag
    outs = [0] * (max(fields.output_map, default=-1) + 1)
    for flag, arg in zip(fields.output_formats, fields.output_map):
        outs[arg] = flag
    return ins, outs
