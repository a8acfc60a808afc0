"""Which NPU compiler adapter compiles a partition: ``get_compiler``."""

from __future__ import annotations

from ..errors import ConfigError
from ..targets import Target
from .base import NpuArtifact, NpuCompiler  # noqa: F401  (re-exported by mcu_npu.npu)
from .families import families
from .reference import ReferenceCompiler


def vendor_compilers() -> dict[str, type]:
    """The vendor compiler adapters of the known NPU families, by ``npu_compiler`` name
    (``NpuSpec.vendor_compiler``)."""
    return {f.compiler: f.adapter() for f in families()}


def compiler_names() -> tuple[str, ...]:
    """What ``npu_compiler`` takes."""
    return ("auto", "reference", *(f.compiler for f in families()))


COMPILER_NAMES = compiler_names()
"""What ``npu_compiler`` takes with the built-in NPU families (the CLI's choices)."""


def get_compiler(name: str, target: Target) -> NpuCompiler:
    """The compiler called ``name``; "auto" picks the target's vendor compiler when it is
    installed, else the reference compiler."""
    if name == "reference":
        return ReferenceCompiler()
    vendors = vendor_compilers()
    if name in vendors:
        return vendors[name]()
    if name != "auto":
        raise ConfigError(f"unknown npu_compiler {name!r}; choose one of: "
                          f"{', '.join(compiler_names())}")
    vendor = vendors.get(target.npu.vendor_compiler)
    if vendor is None:
        raise ConfigError(f"target {target.name!r} names an unknown vendor compiler "
                          f"{target.npu.vendor_compiler!r}; known: {', '.join(vendors)}")
    compiler = vendor()
    return compiler if compiler.available() else ReferenceCompiler()
