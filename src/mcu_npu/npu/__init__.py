"""NPU compiler adapters behind one interface: reference, neutron (eIQ), vela (Arm)."""

from __future__ import annotations

from ..errors import ConfigError
from .base import NpuArtifact, NpuCompiler
from .reference import ReferenceCompiler

COMPILER_NAMES = ("auto", "reference", "neutron")


def get_compiler(name: str, target) -> NpuCompiler:
    """The compiler called ``name``; "auto" picks the vendor tool when it is installed."""
    from .neutron import NeutronCompiler

    if name == "auto":
        neutron = NeutronCompiler()
        if target.npu.kind == "neutron" and neutron.available():
            return neutron
        return ReferenceCompiler()
    if name == "reference":
        return ReferenceCompiler()
    if name == "neutron":
        return NeutronCompiler()
    raise ConfigError(f"unknown npu_compiler {name!r}; choose one of: {', '.join(COMPILER_NAMES)}")


__all__ = ["NpuArtifact", "NpuCompiler", "ReferenceCompiler", "get_compiler", "COMPILER_NAMES"]
