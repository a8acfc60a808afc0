"""The few tables of a ``.pte`` and a ``.ptd`` that ``mcu-npu report`` needs, read with the
flatbuffers runtime alone, so printing a report loads neither torch nor ExecuTorch.

- ``.ptd`` (``extension/flat_tensor/serialize/flat_tensor.fbs``): the named data, each
  key's bytes from its segment after the ``FH01`` header's segment base;
- ``.pte`` (``schema/program.fbs``): per execution plan its operators (name, overload)
  and its delegates' backend ids.

The field numbers are the schemas' (a table's n-th field sits at vtable offset 4 + 2n).
Anything that is not such a file raises ``ValueError``; callers name the file.
"""

from __future__ import annotations

from flatbuffers.table import Table

_PTD_HEADER = b"FH01"


def _root(data: bytes) -> Table:
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes are too few for a flatbuffer")
    return Table(bytearray(data), int.from_bytes(data[:4], "little"))


def _field(table: Table, n: int) -> int:
    return table.Offset(4 + 2 * n)


def _tables(table: Table, n: int) -> list[Table]:
    """The tables of vector field ``n`` of ``table``."""
    at = _field(table, n)
    if not at:
        return []
    start = table.Vector(at)
    return [Table(table.Bytes, table.Indirect(start + 4 * i))
            for i in range(table.VectorLen(at))]


def _string(table: Table, n: int) -> str:
    at = _field(table, n)
    return table.String(table.Pos + at).decode() if at else ""


def _scalar(table: Table, n: int, width: int) -> int:
    at = _field(table, n)
    if not at:
        return 0
    pos = table.Pos + at
    return int.from_bytes(table.Bytes[pos:pos + width], "little")


def named_data(blob: bytes) -> dict[str, bytes]:
    """The named data of a ``.ptd`` file: key -> bytes."""
    blob = bytes(blob)
    if blob[8:12] != _PTD_HEADER:
        raise ValueError("no FH01 header")
    segment_base = int.from_bytes(blob[32:40], "little")
    root = _root(blob)
    segments = [(_scalar(s, 0, 8), _scalar(s, 1, 8)) for s in _tables(root, 1)]
    found = {}
    for entry in _tables(root, 2):
        offset, size = segments[_scalar(entry, 1, 4)]
        start = segment_base + offset
        if start + size > len(blob):
            raise ValueError("a segment lies past the end of the file")
        found[_string(entry, 0)] = blob[start:start + size]
    return found


def operators_and_delegates(pte: bytes) -> tuple[list[str], list[str]]:
    """(operators ``ns::name.overload``, delegate backend ids) of a ``.pte``, over all its
    methods, in first-use order (as ``kernels_list.program_operators``)."""
    pte = bytes(pte)
    if pte[4:8] != b"ET12":
        raise ValueError("not an ExecuTorch program")
    ops, delegates = [], []
    for plan in _tables(_root(pte), 1):  # Program.execution_plan
        for op in _tables(plan, 6):  # ExecutionPlan.operators
            name, overload = _string(op, 0), _string(op, 1)
            ops.append(f"{name}.{overload}" if overload else name)
        delegates += [_string(d, 0) for d in _tables(plan, 7)]  # delegates: BackendDelegate.id
    return list(dict.fromkeys(ops)), list(dict.fromkeys(delegates))
