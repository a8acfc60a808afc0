"""NPU compiler adapters behind one interface: reference, neutron (eIQ), vela (Arm); and the
payload formats they write, one package per NPU family (``ethos_u``: Vela and its bin
stream; ``neutron``: the Neutron converter and its payload).

The host runtime reads those formats and compiles nothing, so importing this package loads
no compiler: the adapters (``NpuArtifact``, ``NpuCompiler``, ``ReferenceCompiler``,
``get_compiler``, from ``base``, ``reference`` and ``compilers``) and the names
``npu_compiler`` takes (``COMPILER_NAMES``) load on first use.
"""

from __future__ import annotations

_ON_FIRST_USE = ("NpuArtifact", "NpuCompiler", "ReferenceCompiler", "get_compiler",
                 "COMPILER_NAMES")


def __getattr__(name: str):
    if name in _ON_FIRST_USE:
        from . import compilers  # the adapters and the TFLite converter they build on

        return getattr(compilers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_ON_FIRST_USE)
