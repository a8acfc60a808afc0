"""The report's copy inside the ``.pte``: the named data it is stored under, stored at
serialization with room to spare, and rewritten in place once the program exists."""

from __future__ import annotations

from dataclasses import replace

REPORT_KEY = "mcu_npu.report"
"""The named data of the ``.pte`` that holds the report."""
REPORT_SLACK = 2048
"""Spaces after the report stored at serialization (JSON ignores them), room for what is
known only once the program exists: its accuracy on the host and its memory."""


def stored_report(report, slack: int = REPORT_SLACK) -> bytes:
    """The report as stored in the ``.pte`` at serialization, padded with ``slack`` spaces."""
    return _stored_json(report) + b" " * slack


def restore_report(buffer: bytes, stored: bytes, report) -> bytes:
    """``buffer`` (a ``.pte`` holding ``stored``) with the stored report replaced, in place
    and at the same length, by ``report``: accuracy and memory, measured on the serialized
    program, then travel in the file. Nothing the device runtime reads moves. Memory is left
    out if both do not fit (``load`` measures it again), then the per-layer table."""
    at = buffer.find(stored)
    if at < 0 or buffer.find(stored, at + 1) >= 0:
        raise ValueError("the stored report is not once in the program")
    for candidate in (report, replace(report, memory={}), replace(report, memory={}, layers=[])):
        text = _stored_json(candidate)
        if len(text) <= len(stored):
            text += b" " * (len(stored) - len(text))
            return buffer[:at] + text + buffer[at + len(stored):]
    return buffer


def _stored_json(report) -> bytes:
    """Compact JSON without what ``load`` reads from the program itself (the kernels)."""
    return replace(report, kernels=[], kernel_problems=[]).to_json(indent=None).encode()
