"""Typed compile specs: the one place they become ExecuTorch ``CompileSpec`` bytes."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from executorch.exir.backend.compile_spec_schema import CompileSpec

from ..errors import ConfigError

KEY = "mcu_npu"


@dataclass(frozen=True, kw_only=True)
class NpuCompileSpec:
    """What a delegate's preprocess needs: the target preset, the NPU compiler to use and
    where the program lives (``targets.PLACEMENTS``; "" for the preset's settings, and then
    left out of the bytes)."""

    target: str = "imxrt700"
    npu_compiler: str = "auto"
    memory: str = ""

    def to_compile_specs(self) -> list[CompileSpec]:
        fields_ = {k: v for k, v in asdict(self).items() if k != "memory" or v}
        return [CompileSpec(KEY, json.dumps(fields_, sort_keys=True).encode())]

    @classmethod
    def from_compile_specs(cls, specs) -> "NpuCompileSpec":
        for spec in specs:
            if spec.key == KEY:
                raw = json.loads(bytes(spec.value))
                known = {f.name for f in fields(cls)}
                unknown = set(raw) - known
                if unknown:
                    raise ConfigError(f"unknown compile spec fields: {sorted(unknown)}")
                return cls(**raw)
        raise ConfigError(f"compile specs lack the {KEY!r} entry")
