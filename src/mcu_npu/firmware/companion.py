"""The companion file: everything only the host reads, beside the device program.

``prog.save("model.pte")`` writes the device program and ``model.ptd`` beside it. The
companion is an ExecuTorch external-data file (FlatTensor, ``.ptd``) of named data:

- ``mcu_npu.companion``: JSON ``{"format", "pte_sha256", "pte_bytes", "mcu_npu"}``, the
  device program it belongs to;
- ``mcu_npu.report``: the compile report (placement, partitions, accuracy, per-layer rows,
  precision record, latency, memory) as JSON;
- ``mcu_npu.host_graph.*``: the partition graphs behind vendor NPU payloads, which the host
  emulator runs (``device.payload.host_graph_key``).

The device ``.pte`` names none of these, so no device runtime tries to resolve them, and its
bytes are the same whether the companion exists or not. The host refuses a companion whose
digest is not the program's. docs/companion.md documents the pair.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import InvalidProgramError

SUFFIX = ".ptd"
COMPANION_KEY = "mcu_npu.companion"
REPORT_KEY = "mcu_npu.report"
FORMAT = 1
_ALIGN = 16


@dataclass(frozen=True)
class Companion:
    """A companion read back: the report (None when it holds none), the host graphs by
    named-data key, and the digest of the program it belongs to."""

    pte_sha256: str
    report: object = None
    host_data: dict[str, bytes] = field(default_factory=dict)
    path: str = ""


def companion_path(pte_path: str | os.PathLike) -> Path:
    """Where the companion of the program at ``pte_path`` lives: ``model.pte`` ->
    ``model.ptd`` (ExecuTorch's naming of a program's external data)."""
    return Path(pte_path).with_suffix(SUFFIX)


def digest(pte: bytes) -> str:
    return hashlib.sha256(bytes(pte)).hexdigest()


def pack(pte: bytes, report, host_data: dict[str, bytes]) -> bytes:
    """The companion of the device program ``pte``: its digest, ``report``, ``host_data``."""
    from ..upstream.private import DataEntry, DataPayload
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    from ..version import __version__

    record = {"format": FORMAT, "pte_sha256": digest(pte), "pte_bytes": len(pte),
              "mcu_npu": __version__}
    entries = {COMPANION_KEY: json.dumps(record).encode()}
    if report is not None:
        entries[REPORT_KEY] = stored_report(report)
    entries.update(sorted(host_data.items()))
    buffers = list(entries.values())
    named = {key: DataEntry(buffer_index=i, alignment=_ALIGN, tensor_layout=None)
             for i, key in enumerate(entries)}
    return bytes(FlatTensorSerializer().serialize(DataPayload(buffers=buffers,
                                                              named_data=named)))


def stored_report(report) -> bytes:
    """The report as the companion keeps it: JSON without what ``load`` reads from the
    program itself (the kernels)."""
    return replace(report, kernels=[], kernel_problems=[]).to_json(indent=None).encode()


def read_named_data(blob: bytes, what: str) -> dict[str, bytes]:
    """The named data of an ExecuTorch ``.ptd`` file (read without torch, ``tables``);
    InvalidProgramError naming ``what`` when the bytes are not one."""
    from .tables import named_data

    try:
        return named_data(blob)
    except Exception as exc:  # noqa: BLE001  (flatbuffers raise many types on corrupt data)
        raise InvalidProgramError(f"{what} is not an ExecuTorch data file (.ptd): "
                                  f"{type(exc).__name__}: {exc}") from None


def unpack(blob: bytes, pte: bytes, what: str = "the companion file") -> Companion:
    """The companion ``blob`` of the device program ``pte``; InvalidProgramError when it is
    no mcu-npu companion or belongs to another program."""
    from ..report import Report

    named = read_named_data(blob, what)
    try:
        record = json.loads(named[COMPANION_KEY])
        want = record["pte_sha256"]
    except (KeyError, TypeError, ValueError):
        raise InvalidProgramError(f"{what} is no mcu-npu companion (it lacks the "
                                  f"{COMPANION_KEY!r} record)") from None
    have = digest(pte)
    if want != have:
        raise InvalidProgramError(
            f"{what} belongs to another program (written for a .pte of digest {want[:12]}..., "
            f"this one's is {have[:12]}...): copy the .pte and its .ptd together from the "
            f"same compile")
    report = None
    if REPORT_KEY in named:
        try:
            report = Report.from_json(named[REPORT_KEY])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidProgramError(f"{what}: its report is corrupt: "
                                      f"{type(exc).__name__}: {exc}") from None
    host = {k: v for k, v in named.items() if k not in (COMPANION_KEY, REPORT_KEY)}
    return Companion(want, report, host, what)


def read(path: str | os.PathLike, pte: bytes) -> Companion:
    """The companion at ``path`` of the device program ``pte``."""
    try:
        blob = Path(path).read_bytes()
    except FileNotFoundError:
        raise InvalidProgramError(f"companion file '{os.fspath(path)}' not found") from None
    except OSError as exc:
        raise InvalidProgramError(f"cannot read companion file '{os.fspath(path)}': "
                                  f"{exc.strerror}") from None
    return unpack(blob, pte, f"companion file '{os.fspath(path)}'")


def find(pte_path: str | os.PathLike, pte: bytes) -> Companion | None:
    """The companion beside the program at ``pte_path``, None when there is none."""
    path = companion_path(pte_path)
    return read(path, pte) if path.is_file() else None


def resolve(source, pte: bytes, given=None) -> tuple[Companion | None, str | None]:
    """(the companion of the program ``pte`` read from ``source``, and how to name it in a
    message): ``given`` (a path, or the file's bytes) when there is one, else the ``.ptd``
    beside a path ``source`` if it exists. None (and, for bytes with no companion given, no
    name) when there is none."""
    if given is None:
        if not isinstance(source, (str, os.PathLike)):
            return None, None
        return find(source, pte), f"'{companion_path(source)}'"
    if isinstance(given, (str, os.PathLike)):
        return read(given, pte), f"'{os.fspath(given)}'"
    return unpack(bytes(given), pte), "(given as bytes)"


def saved_report(pte_path: str | os.PathLike, given=None):
    """The report of the program saved at ``pte_path`` as its companion (``given``, or the
    ``.ptd`` beside it) holds it, with the kernels read from the program, all without torch
    (``mcu-npu report``); None when there is no companion or it lacks a report or memory
    figures (``api.load(...).report`` then makes what it can)."""
    from .kernels_list import fill_report

    path = Path(pte_path)
    if not path.is_file():
        return None
    pte = path.read_bytes()
    pair, _ = resolve(path, pte, given)
    if pair is None or pair.report is None or not pair.report.memory:
        return None
    if not pair.report.kernels:
        fill_report(pair.report, pte)
    return pair.report
