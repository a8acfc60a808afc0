"""Sizes on the 32-bit Cortex-M a program runs on, shared by the memory estimate and the NPU
families' payload figures."""

POINTER = 4
"""Bytes of a pointer, ``size_t`` and ``ssize_t`` on a 32-bit Cortex-M."""


def align(n: int, to: int = POINTER) -> int:
    """``n`` rounded up to a multiple of ``to``."""
    return (n + to - 1) // to * to
