"""The mcu-npu payload container: named, 16-byte aligned sections behind a small header.

Layout (little endian), version 2::

    00 00 00 ff | b"MNPU" | u16 version | u16 section count | 20 zero bytes |
    count x (name: 16 bytes NUL-padded, u32 offset, u32 size) | section data, each starting
    at a 16-byte boundary

The first four bytes are a device guard: the Neutron runtime reads them as 0 inputs,
0 outputs and payload version 255, then looks for its microcode magic at byte 16 and finds 0,
so its init refuses the payload ("does not contain a valid Neutron microcode") instead of
misreading it; the Ethos-U runtime refuses it for lacking its ``vela_bin_stream`` block.
Version 1 containers (``b"MNPU"`` at byte 0, no guard) are still read.

Sections used: ``meta`` (UTF-8 JSON: compiler, target, partition inputs / outputs with their
layout and quantization, compiler statistics) and ``tflite`` (the partition's int8 TFLite
graph). docs/payload.md documents this and the vendor layouts.

A vendor payload (Vela's command stream, Neutron microcode) is no container: its partition's
graph, in a container, is kept for the host emulator as named data under
``host_graph_key(payload)`` with the external tag ``HOST_DATA_TAG``, so serialization puts
it in the program's companion file (``firmware.companion``), never in the device ``.pte``.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import asdict

from ..errors import InvalidProgramError
from .tflite_model import IOSpec, TFLiteModel

MAGIC = b"MNPU"
VERSION = 2
DEVICE_GUARD = b"\x00\x00\x00\xff"
"""Read by the Neutron runtime as 0 inputs, 0 outputs, 0 arguments, payload version 255."""
ALIGN = 16
_HEADER = struct.Struct("<4s4sHH20x")  # guard, magic, version, count; byte 16..19 stay 0
_HEADER_V1 = struct.Struct("<4sHH")
_ENTRY = struct.Struct("<16sII")
HOST_GRAPH_PREFIX = "mcu_npu.host_graph."
HOST_DATA_TAG = "mcu_npu_host"
"""The external-data tag of the host graphs: ExecuTorch serializes them apart from the .pte."""


def host_graph_key(payload: bytes, host_graph: bytes | None = None) -> str:
    """Named-data key of the host graph kept beside ``payload``: the payload's digest, then
    (given ``host_graph``) the graph's own. Two partitions can compile to the same payload
    from graphs that differ only in tensor names; each keeps its graph under its own key,
    and any of them reproduces what that payload computes."""
    key = HOST_GRAPH_PREFIX + hashlib.sha256(bytes(payload)).hexdigest()[:16]
    if host_graph is not None:
        key += "." + hashlib.sha256(bytes(host_graph)).hexdigest()[:16]
    return key


def find_host_graph(named_data, payload: bytes) -> bytes | None:
    """The host graph kept beside ``payload`` in a program's named data, if any."""
    key = host_graph_key(payload)
    if key in named_data:
        return named_data[key]
    return next((v for k, v in named_data.items() if k.startswith(key + ".")), None)


def _pad(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def pack(sections: dict[str, bytes]) -> bytes:
    """Serialize ``sections`` (name -> bytes) into one container."""
    table_end = _pad(_HEADER.size + _ENTRY.size * len(sections))
    entries, blobs, offset = [], [], table_end
    for name, data in sections.items():
        if len(name.encode()) > 16:
            raise ValueError(f"section name {name!r} is longer than 16 bytes")
        entries.append(_ENTRY.pack(name.encode(), offset, len(data)))
        blobs.append(data + b"\0" * (_pad(len(data)) - len(data)))
        offset += _pad(len(data))
    head = _HEADER.pack(DEVICE_GUARD, MAGIC, VERSION, len(sections)) + b"".join(entries)
    return head + b"\0" * (table_end - len(head)) + b"".join(blobs)


def is_container(buffer: bytes) -> bool:
    """Whether ``buffer`` starts as an mcu-npu container (version 2, or version 1)."""
    head = bytes(buffer[:8])
    return head == DEVICE_GUARD + MAGIC or head[:4] == MAGIC


def unpack(buffer: bytes) -> dict[str, bytes]:
    """Sections of a container; InvalidProgramError when the bytes are not one."""
    buffer = bytes(buffer)
    if len(buffer) < _HEADER_V1.size or not is_container(buffer):
        raise InvalidProgramError("delegate payload is not an mcu-npu container (bad magic)")
    if buffer[:4] == MAGIC:
        header, (_, version, count) = _HEADER_V1, _HEADER_V1.unpack_from(buffer)
        expected = 1
    else:
        if len(buffer) < _HEADER.size:
            raise InvalidProgramError("payload container is truncated")
        header, (_, _, version, count) = _HEADER, _HEADER.unpack_from(buffer)
        expected = VERSION
    if version != expected:
        raise InvalidProgramError(f"payload container version {version} is not supported "
                                  f"(this mcu-npu reads versions 1 and {VERSION})")
    if header.size + count * _ENTRY.size > len(buffer):
        raise InvalidProgramError("payload container is truncated")
    sections = {}
    for i in range(count):
        name, offset, size = _ENTRY.unpack_from(buffer, header.size + i * _ENTRY.size)
        if offset + size > len(buffer):
            raise InvalidProgramError("payload container is truncated")
        sections[name.rstrip(b"\0").decode()] = buffer[offset:offset + size]
    return sections


def model_meta(model: TFLiteModel) -> dict:
    return {"inputs": [asdict(s) for s in model.inputs],
            "outputs": [asdict(s) for s in model.outputs]}


def pack_reference(model: TFLiteModel, meta: dict) -> bytes:
    """A payload carrying the TFLite graph itself (run by the host emulator)."""
    meta = {**meta, **model_meta(model)}
    return pack({"meta": json.dumps(meta).encode(), "tflite": model.buffer})


def _tuple_or_none(seq):
    return None if seq is None else tuple(seq)


def unpack_reference(buffer: bytes) -> tuple[TFLiteModel, dict]:
    """(TFLiteModel, meta) of a payload written by ``pack_reference``."""
    sections = unpack(buffer)
    try:
        meta = json.loads(sections["meta"])
        tflite = sections["tflite"]
    except (KeyError, ValueError) as exc:
        raise InvalidProgramError(f"payload container lacks a valid section: {exc}") from None

    def specs(key):
        return tuple(IOSpec(**{**s, "shape": tuple(s["shape"]), "perm": tuple(s["perm"]),
                                "dim_order": _tuple_or_none(s.get("dim_order"))})
                     for s in meta[key])

    return TFLiteModel(tflite, specs("inputs"), specs("outputs")), meta
