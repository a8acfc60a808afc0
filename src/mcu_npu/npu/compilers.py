"""Which NPU compiler adapter compiles a partition: ``get_compiler``."""

from __future__ import annotations

from ..errors import ConfigError
from ..targets import Target
from .base import NpuArtifact, NpuCompiler  # noqa: F401  (re-exported by mcu_npu.npu)
from .neutron.compiler import NeutronCompiler
from .reference import ReferenceCompiler
from .ethos_u.vela import VelaCompiler

VENDOR_COMPILERS = {"neutron": NeutronCompiler, "vela": VelaCompiler}
"""The vendor compiler adapters by ``npu_compiler`` name (``NpuSpec.vendor_compiler``)."""
COMPILER_NAMES = ("auto", "reference", *VENDOR_COMPILERS)
"""What ``npu_compiler`` takes."""


def get_compiler(name: str, target: Target) -> NpuCompiler:
    """The compiler called ``name``; "auto" picks the target's vendor compiler when it is
    installed, else the reference compiler."""
    if name == "reference":
        return ReferenceCompiler()
    if name in VENDOR_COMPILERS:
        return VENDOR_COMPILERS[name]()
    if name != "auto":
        raise ConfigError(f"unknown npu_compiler {name!r}; choose one of: "
                          f"{', '.join(COMPILER_NAMES)}")
    vendor = VENDOR_COMPILERS.get(target.npu.vendor_compiler)
    if vendor is None:
        raise ConfigError(f"target {target.name!r} names an unknown vendor compiler "
                          f"{target.npu.vendor_compiler!r}; known: {', '.join(VENDOR_COMPILERS)}")
    compiler = vendor()
    return compiler if compiler.available() else ReferenceCompiler()
