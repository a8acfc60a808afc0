"""NPU compiler adapters behind one interface: reference, neutron (eIQ), vela (Arm)."""

from __future__ import annotations

from ..errors import ConfigError
from .base import NpuArtifact, NpuCompiler
from .reference import ReferenceCompiler

COMPILER_NAMES = ("auto", "reference", "neutron", "vela")


def get_compiler(name: str, target) -> NpuCompiler:
    """The compiler called ``name``; "auto" picks the vendor tool when it is installed."""
    if name == "reference":
        return ReferenceCompiler()
    if name == "neutron" or (name == "auto" and target.npu.kind == "neutron"):
        from .neutron import NeutronCompiler

        neutron = NeutronCompiler()
        return neutron if name == "neutron" or neutron.available() else ReferenceCompiler()
    if name == "vela" or (name == "auto" and target.npu.kind == "ethos-u"):
        from .vela import VelaCompiler

        vela = VelaCompiler()
        return vela if name == "vela" or vela.available() else ReferenceCompiler()
    if name == "auto":
        return ReferenceCompiler()
    raise ConfigError(f"unknown npu_compiler {name!r}; choose one of: {', '.join(COMPILER_NAMES)}")


__all__ = ["NpuArtifact", "NpuCompiler", "ReferenceCompiler", "get_compiler", "COMPILER_NAMES"]
