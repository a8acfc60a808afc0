"""The payload the ExecuTorch Ethos-U runtime (VelaBinStream.cpp) reads: a Vela bin stream.

A sequence of blocks, each a 32-byte header (name NUL-padded to 16 bytes, u32 size without
padding, u8 external flag, 11 reserved bytes) followed by its data zero-padded to 16 bytes.
The blocks, in this order: ``vela_bin_stream`` (empty), ``cmd_data``, ``weight_data``,
``scratch_size`` (u32), ``inputs``, ``outputs``, ``vela_end_stream`` (empty). ``inputs`` and
``outputs`` are an i32 count, then per tensor nine i32: a 6-D shape, the element size, the
offset into the scratch area and the memory region. ``parse`` applies the runtime's checks.
docs/payload.md has the byte-level tables.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ...errors import InvalidProgramError

ALIGN = 16
HEADER = struct.Struct("<16sIB11s")
IO_STRUCT = struct.Struct("<9i")
IO_RANK = 6
BLOCKS = ("vela_bin_stream", "cmd_data", "weight_data", "scratch_size", "inputs", "outputs",
          "vela_end_stream")
COMMAND_MAGICS = (b"COP1", b"COP2")
"""Driver-actions formats the runtime accepts at the start of ``cmd_data``."""


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class VelaIO:
    """Where one NPU input or output lives: shape (6-D, NHWC at the end), element size, the
    byte offset in the region and the region (the runtime's base-pointer index)."""

    shape: tuple[int, ...]
    elem_size: int
    offset: int
    region: int


@dataclass(frozen=True, kw_only=True)
class VelaBinStream:
    """The fields of one bin stream."""

    cmd_data: bytes
    weight_data: bytes
    scratch_size: int
    inputs: tuple[VelaIO, ...]
    outputs: tuple[VelaIO, ...]


def _block(name: str, data: bytes) -> bytes:
    header = HEADER.pack(name.encode(), len(data), 0, b"")
    return header + data + b"\0" * (align(len(data)) - len(data))


def _pack_ios(ios: tuple[VelaIO, ...]) -> bytes:
    out = struct.pack("<i", len(ios))
    for io in ios:
        if len(io.shape) != IO_RANK:
            raise ValueError(f"Vela IO shape {io.shape} is not {IO_RANK}-D")
        out += IO_STRUCT.pack(*io.shape, io.elem_size, io.offset, io.region)
    return out


def compose(stream: VelaBinStream) -> bytes:
    """The bin-stream bytes for ``stream``; command and weight data are kept inline."""
    data = {
        "vela_bin_stream": b"", "cmd_data": stream.cmd_data,
        "weight_data": stream.weight_data,
        "scratch_size": struct.pack("<I", stream.scratch_size),
        "inputs": _pack_ios(stream.inputs), "outputs": _pack_ios(stream.outputs),
        "vela_end_stream": b"",
    }
    return b"".join(_block(name, data[name]) for name in BLOCKS)


def blocks(blob: bytes) -> list[tuple[str, int, bytes]]:
    """(name, external flag, data) of every block, in order; InvalidProgramError if torn."""
    if len(blob) % ALIGN:
        raise InvalidProgramError(f"Vela bin stream is {len(blob)} bytes, not a multiple of 16")
    out, at = [], 0
    while at < len(blob):
        if at + HEADER.size > len(blob):
            raise InvalidProgramError(f"Vela bin stream: block header at {at} runs past the end")
        raw_name, size, external, _ = HEADER.unpack_from(blob, at)
        name = raw_name.split(b"\0", 1)[0].decode("ascii", "replace")
        start = at + HEADER.size
        if start + align(size) > len(blob):
            raise InvalidProgramError(f"Vela bin stream: block {name!r} ({size} bytes at "
                                      f"{start}) runs past the end ({len(blob)} bytes)")
        out.append((name, external, blob[start:start + size]))
        at = start + align(size)
    return out


def _unpack_ios(name: str, data: bytes) -> tuple[VelaIO, ...]:
    if len(data) < 4:
        raise InvalidProgramError(f"Vela bin stream: {name} block has no count")
    (count,) = struct.unpack_from("<i", data)
    if count < 0 or len(data) != 4 + count * IO_STRUCT.size:
        raise InvalidProgramError(f"Vela bin stream: {name} block is {len(data)} bytes for "
                                  f"{count} tensors")
    fields = (IO_STRUCT.unpack_from(data, 4 + i * IO_STRUCT.size) for i in range(count))
    return tuple(VelaIO(tuple(f[:IO_RANK]), *f[IO_RANK:]) for f in fields)


def parse(blob: bytes) -> VelaBinStream:
    """Read a bin stream with the runtime's checks: header block first, footer block last,
    known block names, ``cmd_data`` starting with COP1 or COP2. External blocks (data in a
    separate named-data file) are refused: this project keeps everything inline."""
    found = blocks(blob)
    names = [name for name, _, _ in found]
    if names != list(BLOCKS):
        raise InvalidProgramError(f"Vela bin stream blocks are {names}, expected {list(BLOCKS)}")
    data = {name: payload for name, _, payload in found}
    external = [name for name, flag, _ in found if flag]
    if external:
        raise InvalidProgramError(f"Vela bin stream blocks {external} are external references")
    if data["cmd_data"][:4] not in COMMAND_MAGICS:
        raise InvalidProgramError(f"Vela command stream starts with {data['cmd_data'][:4]!r}, "
                                  "expected b'COP1' or b'COP2'")
    if len(data["scratch_size"]) != 4:
        raise InvalidProgramError("Vela bin stream: scratch_size block is not 4 bytes")
    return VelaBinStream(
        cmd_data=data["cmd_data"], weight_data=data["weight_data"],
        scratch_size=struct.unpack("<I", data["scratch_size"])[0],
        inputs=_unpack_ios("inputs", data["inputs"]),
        outputs=_unpack_ios("outputs", data["outputs"]))


def input_count(processed: bytes, named_data) -> int:
    """How many leading delegate arguments are inputs: ``EthosUBackend.cpp`` reads inputs
    from ``args[0 .. handles.inputs->count)`` and outputs after them, the counts from the
    Vela payload's input records (a reference payload's graph: its inputs)."""
    from ...device.payload import is_container, unpack_reference

    processed = bytes(processed)
    if is_container(processed):
        return len(unpack_reference(processed)[0].inputs)
    return len(parse(processed).inputs)
