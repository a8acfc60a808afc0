"""The NPU families by kind: each one's package under ``npu/`` (``ethos_u``, ``neutron``)
holds its compiler adapter, its payload format and what its device runtime reads
(``runtime``); code that differs by family asks here instead of branching on the kind."""

from __future__ import annotations

import importlib
from types import ModuleType

from ..targets import NpuKind

PACKAGES = {NpuKind.ETHOS_U: "ethos_u", NpuKind.NEUTRON: "neutron"}
"""Each family's package, by NPU kind."""


def family_module(kind: NpuKind, module: str) -> ModuleType | None:
    """``module`` of ``kind``'s family package (e.g. ``"runtime"``), or None for a kind with
    no package."""
    package = PACKAGES.get(kind)
    return None if package is None else importlib.import_module(f"{__package__}.{package}."
                                                                f"{module}")
