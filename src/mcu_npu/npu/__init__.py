"""NPU compiler adapters behind one interface: reference, neutron (eIQ), vela (Arm)."""

from __future__ import annotations

from ..errors import ConfigError
from .base import NpuArtifact, NpuCompiler
from .reference import ReferenceCompiler

COMPILER_NAMES = ("auto", "reference", "neutron")


def get_compiler(name: str, target) -> NpuCompiler:
    """The compiler called ``name``; "auto" picks the vendor tool when it is installed."""
    if name == "reference":
        return ReferenceCompiler()
    if name in ("auto", "neutron"):
        from .neutron import NeutronCompiler

        neutron = NeutronCompiler()
        if name == "neutron" or (target.npu.kind == "neutron" and neutron.available()):
            return neutron
        return ReferenceCompiler()
    raise ConfigError(f"unknown npu_compiler {name!r}; choose one of: {', '.join(COMPILER_NAMES)}")


__all__ = ["NpuArtifact", "NpuCompiler", "ReferenceCompiler", "get_compiler", "COMPILER_NAMES"]
