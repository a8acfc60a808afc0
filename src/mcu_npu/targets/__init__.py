"""Hardware targets as data: one frozen dataclass per NPU, CPU and SoC preset (``spec``), the
presets one module per vendor (``arm``, ``nxp``, ``alif``, ``renesas``, ``infineon``,
``himax``), and the Vela configuration files of the boards Vela's own Arm/vela.ini does not
describe (``vela/<vendor>.ini``, package data).

Every figure of a preset carries its source (``NpuSpec.source``, ``CpuSpec.source``,
``MemoryRegion.source``); a figure that is not published says so there. Support checks read
their limits from these fields; nothing in the converter or the partitioner branches on a
target's name.
"""

from __future__ import annotations

from ..errors import ConfigError
from . import alif, arm, himax, infineon, nxp, renesas
from .arm import CORSTONE_300_MEMORY, CORSTONE_320_MEMORY, ethos_u, vela_ini, vela_memory
from .nxp import IMXRT700_MEMORY, NEUTRON_N1_16, NEUTRON_N3_64
from .spec import (MEMORY_CHOICES, MEMORY_KINDS, MEMORY_ROLES, PLACEMENTS, CpuSpec,
                   MemoryRegion, NeutronLimits, NpuKind, NpuSpec, Target, VelaConfig)

_PRESETS: dict[str, Target] = {
    t.name: t for module in (nxp, arm, alif, renesas, infineon, himax) for t in module.PRESETS}


def targets() -> list[str]:
    """Names of the target presets, sorted."""
    return sorted(_PRESETS)


def register_target(target: Target) -> Target:
    """Add ``target`` to the presets, so a compile (and its delegates' compile specs) can name
    it; for a board the presets lack, or an NPU family added with
    ``npu.families.register``. A preset of that name must be the same target."""
    known = _PRESETS.get(target.name.lower())
    if known is not None and known != target:
        raise ConfigError(f"target {target.name!r} is already a different preset; give yours "
                          "another name")
    _PRESETS[target.name.lower()] = target
    return target


def get_target(target: str | Target) -> Target:
    """The preset called ``target`` (a Target passes through); ConfigError lists valid names."""
    if isinstance(target, Target):
        return target
    try:
        return _PRESETS[str(target).lower()]
    except KeyError:
        raise ConfigError(
            f"unknown target {target!r}; valid targets: {', '.join(targets())}"
        ) from None


__all__ = ["CORSTONE_300_MEMORY", "CORSTONE_320_MEMORY", "IMXRT700_MEMORY", "MEMORY_CHOICES",
           "MEMORY_KINDS", "MEMORY_ROLES", "NEUTRON_N1_16", "NEUTRON_N3_64", "PLACEMENTS",
           "CpuSpec", "MemoryRegion", "NeutronLimits", "NpuKind", "NpuSpec", "Target",
           "VelaConfig", "ethos_u", "get_target", "register_target", "targets", "vela_ini",
           "vela_memory"]
