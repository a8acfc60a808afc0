"""A ``.pte`` before any parser reads it: its bytes (from a path or as given), whether its
envelope (file identifier, extended header sizes) holds a whole program, and the ScalarType
codes (``schema/scalar_type.fbs``) its tensors carry. No torch: ``mcu-npu check`` uses it."""

from __future__ import annotations

import os
from typing import NamedTuple

from ..errors import InvalidProgramError

_IDENTIFIER = b"ET12"  # the flatbuffer file_identifier of program.fbs


def read_bytes(source, what: str = "program") -> bytes:
    """The bytes of a ``what`` (a program, a bundled program) given as bytes or as a file
    path (InvalidProgramError when the file cannot be read)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        try:
            with open(source, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise InvalidProgramError(f"{what} file '{os.fspath(source)}' not found") from None
        except OSError as exc:
            raise InvalidProgramError(
                f"cannot read {what} file '{os.fspath(source)}': {exc}") from exc
    raise TypeError(f"load() takes bytes or a path, not {type(source).__name__}")


SCALAR_TYPES = {
    0: ("uint8", 1), 1: ("int8", 1), 2: ("int16", 2), 3: ("int32", 4), 4: ("int64", 8),
    5: ("float16", 2), 6: ("float32", 4), 7: ("float64", 8), 8: ("complex32", 4),
    9: ("complex64", 8), 10: ("complex128", 16), 11: ("bool", 1), 12: ("qint8", 1),
    13: ("quint8", 1), 14: ("qint32", 4), 15: ("bfloat16", 2), 16: ("quint4x2", 1),
    17: ("quint2x4", 1), 22: ("bits16", 2), 23: ("float8_e5m2", 1), 24: ("float8_e4m3fn", 1),
    25: ("float8_e5m2fnuz", 1), 26: ("float8_e4m3fnuz", 1), 27: ("uint16", 2),
    28: ("uint32", 4), 29: ("uint64", 8),
}
"""ExecuTorch's ScalarType codes (they match c10's): the torch dtype's name and item size."""


class ScalarType(NamedTuple):
    """A tensor's element type, named as torch names its dtype (``torch.int8``)."""

    name: str
    itemsize: int

    def __str__(self) -> str:
        return f"torch.{self.name}"


def scalar_type(code: int) -> ScalarType:
    """The element type of an ExecuTorch ScalarType code (ValueError when unknown)."""
    try:
        return ScalarType(*SCALAR_TYPES[int(code)])
    except KeyError:
        raise ValueError(f"unknown tensor scalar type {int(code)}") from None


def envelope_problem(data: bytes) -> str | None:
    """Why ``data`` is not a whole ``.pte`` (checked before any flatbuffer parser sees it);
    None when it may be one."""
    if len(data) < 8:
        return f"{len(data)} bytes are too few to be an ExecuTorch program"
    if data[4:8] != _IDENTIFIER:
        return (f"not an ExecuTorch program: file identifier {bytes(data[4:8])!r}, "
                f"expected {_IDENTIFIER!r}")
    if data[8:12] != b"eh00" or len(data) < 40:
        return None
    field = lambda at: int.from_bytes(data[at:at + 8], "little")  # noqa: E731
    program_size, segment_base = field(16), field(24)
    segment_size = field(32) if int.from_bytes(data[12:16], "little") > 24 else 0
    needed = max(program_size, segment_base + segment_size if segment_base else 0)
    if len(data) < needed:
        return (f"the program is truncated: its header declares {needed} bytes, the data has "
                f"{len(data)}")
    return None
