"""The NPU families the flow knows (``npu.family.NpuFamily``): the built-in ones (``ethos_u``,
``neutron``) and any registered with ``register``. Code that differs by family asks here
(``family``, by the NPU kind of a target; ``family_of_backend``, by a delegate's backend id in
a ``.pte``) instead of branching on the kind."""

from __future__ import annotations

from ..errors import ConfigError
from ..targets.spec import accept_npu_kind
from . import ethos_u, neutron
from .family import NpuFamily

_FAMILIES: dict[str, NpuFamily] = {}


def register(family: NpuFamily) -> NpuFamily:
    """Make ``family`` known: targets may name its kind, and its payloads are read, checked
    and run by its rules. Registering the same kind again replaces the family."""
    clash = family_of_backend(family.backend_id)
    if clash is not None and clash.kind != family.kind:
        raise ConfigError(f"NPU family {str(family.kind)!r}: backend id {family.backend_id!r} is "
                          f"already family {str(clash.kind)!r}'s")
    accept_npu_kind(str(family.kind))
    _FAMILIES[str(family.kind)] = family
    return family


def family(kind) -> NpuFamily:
    """The family of NPU kind ``kind`` (a ``targets.NpuKind`` or a registered kind's name)."""
    found = _FAMILIES.get(str(kind))
    if found is None:
        raise ConfigError(f"no NPU family {str(kind)!r} is registered; known: "
                          f"{', '.join(_FAMILIES)} (mcu_npu.npu.families.register adds one)")
    return found


def family_of_backend(backend_id: str) -> NpuFamily | None:
    """The family whose device runtime registers ``backend_id``; None for another backend."""
    return next((f for f in _FAMILIES.values() if f.backend_id == backend_id), None)


def families() -> tuple[NpuFamily, ...]:
    """Every known family, the built-in ones first."""
    return tuple(_FAMILIES.values())


for _built_in in (ethos_u.FAMILY, neutron.FAMILY):
    register(_built_in)
