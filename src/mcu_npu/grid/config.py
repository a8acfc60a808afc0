"""A sweep's configuration file (``mcu-npu sweep CONFIG``), TOML or JSON::

    # sweep.toml
    targets = ["corstone-300", "corstone-320", "imxrt700"]
    precisions = ["int8", "int16"]        # optional, default ["int8"]; "auto" too
    memory = ["auto"]                     # optional: auto, flash, sram, dedicated-sram
    npu_compiler = "auto"                 # optional, for every compile; so is io

    [models]                              # name = factory; or a list of factories
    kws = "models/kws.py:factory"         # a path relative to this file
    resnet8 = "mcu_npu.models.mlperf_tiny:resnet8"

Every value is checked before any compile starts; an unknown key, target, precision or
memory placement is a ConfigError naming it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, first_line
from ..model_source import model_names
from ..targets import MEMORY_CHOICES, get_target

PRECISIONS = ("int8", "int16", "auto")
KEYS = ("models", "targets", "precisions", "memory", "npu_compiler", "io")


@dataclass(frozen=True)
class SweepConfig:
    models: dict[str, str]
    targets: list[str]
    precisions: list = field(default_factory=lambda: ["int8"])
    memory: list[str] = field(default_factory=lambda: ["auto"])
    options: dict = field(default_factory=dict)
    """``npu_compiler`` and ``io`` when given: the other ``compile`` arguments."""


def read_config(path: str | Path) -> SweepConfig:
    """The sweep ``path`` describes (``.toml`` or ``.json``), checked."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"sweep config {str(path)!r} not found")
    data = _parse(path)
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ConfigError(f"sweep config {path}: unknown key(s) {', '.join(unknown)}; the "
                          f"keys are: {', '.join(KEYS)}")
    for key in ("models", "targets"):
        if not data.get(key):
            raise ConfigError(f"sweep config {path}: '{key}' is missing or empty")
    models = data["models"]
    if isinstance(models, list) and all(isinstance(m, str) for m in models):
        models = dict(zip(model_names(models), models))
    if not isinstance(models, dict) or not all(isinstance(m, str) for m in models.values()):
        raise ConfigError(f"sweep config {path}: 'models' is a list of factories "
                          f"('file.py:factory' or 'module:factory') or a table name = factory")
    models = {name: _relative(spec, path.parent) for name, spec in models.items()}
    targets = [get_target(t).name for t in _strings(data, "targets", path)]
    precisions = data.get("precisions", ["int8"])
    precisions = precisions if isinstance(precisions, list) else [precisions]
    memory = _strings(data, "memory", path) if "memory" in data else ["auto"]
    try:
        check_axes(precisions, memory)
    except ConfigError as exc:
        raise ConfigError(f"sweep config {path}: {exc}") from None
    options = {k: data[k] for k in ("npu_compiler", "io") if k in data}
    return SweepConfig(models, targets, precisions, memory, options)


def check_axes(precisions, memory) -> None:
    """ConfigError for a precision or memory placement no compile takes, before any runs
    (a dict or ``AutoPrecision`` precision is checked by the compile itself)."""
    for p in precisions:
        if not (p is None or p in PRECISIONS or not isinstance(p, str)):
            raise ConfigError(f"unknown precision {p!r}; choose from {', '.join(PRECISIONS)} "
                              f"or a table {{default, overrides}}")
    for m in memory:
        if m not in MEMORY_CHOICES:
            raise ConfigError(f"unknown memory placement {m!r}; choose from "
                              f"{', '.join(MEMORY_CHOICES)}")


def _parse(path: Path) -> dict:
    try:
        if path.suffix == ".json":
            data = json.loads(path.read_text())
        elif path.suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                raise ConfigError("reading a TOML sweep config needs Python 3.11 or later; "
                                  "write it as JSON instead") from None
            data = tomllib.loads(path.read_text())
        else:
            raise ConfigError(f"sweep config {str(path)!r}: give a .toml or .json file")
    except (ValueError, OSError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"cannot read sweep config {str(path)!r}: {first_line(exc)}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"sweep config {str(path)!r} must hold a table (a JSON object)")
    return data


def _strings(data: dict, key: str, path: Path) -> list[str]:
    value = data[key]
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"sweep config {path}: '{key}' is a list of names")
    return value


def _relative(spec: str, folder: Path) -> str:
    """A ``file.py:factory`` spec's file taken relative to the config's folder."""
    where, sep, name = spec.rpartition(":")
    if sep and where.endswith(".py") and not Path(where).is_absolute():
        return f"{folder / where}:{name}"
    if spec.endswith(".pt2") and not Path(spec).is_absolute():
        return str(folder / spec)
    return spec
