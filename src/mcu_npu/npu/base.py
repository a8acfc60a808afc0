"""The one interface every NPU compiler adapter implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..targets import Target
from ..device.tflite_model import TFLiteModel


@dataclass(frozen=True)
class NpuArtifact:
    """What an NPU compiler produced for one partition.

    ``payload``: the bytes the device runtime reads (the delegate's processed bytes).
    ``stats``: figures the compiler reports (``npu_cycles``, ``npu_sram_bytes``,
    ``npu_flash_bytes``, ``macs``, ...); absent keys mean the compiler does not say.
    ``host_graph``: the partition's TFLite graph in the mcu-npu container, kept beside a
    vendor payload so the host runtime can emulate it (None when the payload is the graph).
    """

    compiler: str
    payload: bytes
    stats: dict = field(default_factory=dict)
    host_graph: bytes | None = None


class NpuCompiler(Protocol):
    """compile(TFLite partition, target) -> NpuArtifact."""

    name: str

    def available(self) -> bool:
        """Whether the compiler can run here (its SDK imports)."""

    def compile(self, model: TFLiteModel, target: Target) -> NpuArtifact:
        """Compile one partition's TFLite graph for ``target``."""
