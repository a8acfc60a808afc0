"""The few tables of a ``.pte`` and a ``.ptd`` that ``mcu-npu report`` needs, read with the
flatbuffers runtime alone, so printing a report loads neither torch nor ExecuTorch.

- ``.ptd`` (``extension/flat_tensor/serialize/flat_tensor.fbs``): the named data, each
  key's bytes from its segment after the ``FH01`` header's segment base;
- ``.pte`` (``schema/program.fbs``): per execution plan its operators (name, overload)
  and its delegates' backend ids; for ``mcu-npu check`` also its values (tensors' sizes,
  dim order, scalar type), chains of kernel, delegate and move calls, and the delegates'
  processed data (inline or in a segment) and the named data its segments hold.

The field numbers are the schemas' (a table's n-th field sits at vtable offset 4 + 2n; a
union takes two fields, its type code, then its table).
Anything that is not such a file raises ``ValueError``; callers name the file.
"""

from __future__ import annotations

from typing import NamedTuple

from flatbuffers.table import Table

_PTD_HEADER = b"FH01"
_PTE_IDENTIFIER = b"ET12"  # the flatbuffer file_identifier of program.fbs


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


def _scalar(table: Table, n: int, width: int, signed: bool = False) -> int:
    at = _field(table, n)
    if not at:
        return 0
    pos = table.Pos + at
    return int.from_bytes(table.Bytes[pos:pos + width], "little", signed=signed)


def _table(table: Table, n: int) -> Table | None:
    """The table (or union member) of field ``n``; None when absent."""
    at = _field(table, n)
    return Table(table.Bytes, table.Indirect(table.Pos + at)) if at else None


def _ints(table: Table, n: int, width: int = 4, signed: bool = True) -> tuple[int, ...]:
    """The integers of vector field ``n``."""
    at = _field(table, n)
    if not at:
        return ()
    start, data = table.Vector(at), table.Bytes
    return tuple(int.from_bytes(data[start + width * i:start + width * (i + 1)], "little",
                                signed=signed) for i in range(table.VectorLen(at)))


def _bytes(table: Table, n: int) -> bytes:
    at = _field(table, n)
    if not at:
        return b""
    start = table.Vector(at)
    return bytes(table.Bytes[start:start + table.VectorLen(at)])


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


class Tensor(NamedTuple):
    """An ``EValue`` tensor (its ExecuTorch schema field names)."""

    sizes: tuple[int, ...]
    dim_order: tuple[int, ...]
    scalar_type: int
    data_buffer_idx: int
    allocation_info: tuple[int, int, int] | None  # memory id, offset low, high


class Other(NamedTuple):
    """Any other ``EValue`` (``KernelTypes`` union code ``kind``)."""

    kind: int


class EValue(NamedTuple):
    val: Tensor | Other


class KernelCall(NamedTuple):
    op_index: int
    args: tuple[int, ...]


class DelegateCall(NamedTuple):
    delegate_index: int
    args: tuple[int, ...]


class MoveCall(NamedTuple):
    move_from: int
    move_to: int


class Instruction(NamedTuple):
    instr_args: KernelCall | DelegateCall | MoveCall | Other


class Chain(NamedTuple):
    instructions: list[Instruction]


class Delegate(NamedTuple):
    """A ``BackendDelegate``: backend id and its processed data, wherever the file keeps it."""

    id: str
    processed: bytes


class Plan(NamedTuple):
    """An ``ExecutionPlan``: what ``device.delegate_calls.output_counts`` and ``mcu-npu check``
    read of it."""

    name: str
    values: list[EValue]
    inputs: tuple[int, ...]
    chains: list[Chain]
    operators: list[str]
    delegates: list[Delegate]


_TENSOR = 5  # KernelTypes.Tensor; InstructionArguments: KernelCall 1, DelegateCall 2, Move 3


def _evalue(table: Table) -> EValue:
    kind, val = _scalar(table, 0, 1), _table(table, 1)
    if kind != _TENSOR or val is None:
        return EValue(Other(kind))
    info = _table(val, 6)
    allocation = None if info is None else tuple(_scalar(info, k, 4) for k in range(3))
    return EValue(Tensor(_ints(val, 2), _ints(val, 3, 1, False), _scalar(val, 0, 1, True),
                         _scalar(val, 5, 4), allocation))


def _instruction(table: Table) -> Instruction:
    kind, call = _scalar(table, 0, 1), _table(table, 1)
    if call is None:
        return Instruction(Other(kind))
    if kind == 1:
        return Instruction(KernelCall(_scalar(call, 0, 4, True), _ints(call, 1)))
    if kind == 2:
        return Instruction(DelegateCall(_scalar(call, 0, 4, True), _ints(call, 1)))
    if kind == 3:
        return Instruction(MoveCall(_scalar(call, 0, 4, True), _scalar(call, 1, 4, True)))
    return Instruction(Other(kind))


def _segments(pte: bytes, root: Table) -> list[bytes]:
    """The program's data segments, from the extended header's segment base."""
    if pte[8:12] != b"eh00":
        return []
    base = int.from_bytes(pte[24:32], "little")
    found = []
    for segment in _tables(root, 4):  # Program.segments
        start = base + _scalar(segment, 0, 8)
        end = start + _scalar(segment, 1, 8)
        if end > len(pte):
            raise ValueError("a segment lies past the end of the file")
        found.append(pte[start:end])
    return found


def program_tables(pte: bytes) -> tuple[list[Plan], dict[str, bytes]]:
    """(execution plans, named data key -> bytes) of a ``.pte``."""
    pte = bytes(pte)
    if pte[4:8] != _PTE_IDENTIFIER:
        raise ValueError("not an ExecuTorch program")
    root = _root(pte)
    segments = _segments(pte, root)
    inline = [_bytes(d, 0) for d in _tables(root, 3)]  # Program.backend_delegate_data

    def processed(delegate: Table) -> bytes:
        ref = _table(delegate, 1)  # BackendDelegateDataReference: location, index
        where, index = (_scalar(ref, 0, 1), _scalar(ref, 1, 4)) if ref else (0, 0)
        return (segments if where == 1 else inline)[index]

    plans = []
    for plan in _tables(root, 1):
        ops = [_string(o, 0) + (f".{_string(o, 1)}" if _string(o, 1) else "")
               for o in _tables(plan, 6)]
        plans.append(Plan(_string(plan, 0), [_evalue(v) for v in _tables(plan, 2)],
                          _ints(plan, 3),
                          [Chain([_instruction(i) for i in _tables(c, 2)])
                           for c in _tables(plan, 5)],
                          ops, [Delegate(_string(d, 0), processed(d)) for d in _tables(plan, 7)]))
    named = {_string(d, 0): segments[_scalar(d, 1, 4)] for d in _tables(root, 7)}
    return plans, named


def operators_and_delegates(pte: bytes) -> tuple[list[str], list[str]]:
    """(operators ``ns::name.overload``, delegate backend ids) of a ``.pte``, over all its
    methods, in first-use order (as ``kernels_list.program_operators``)."""
    plans, _ = program_tables(pte)
    return (list(dict.fromkeys(op for plan in plans for op in plan.operators)),
            list(dict.fromkeys(d.id for plan in plans for d in plan.delegates)))
