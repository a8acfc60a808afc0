"""The reference NPU compiler: no vendor tool; the payload carries the TFLite graph itself,
which the host runtime executes with LiteRT. Used when no vendor SDK is installed."""

from __future__ import annotations

from ..payload import pack_reference
from ..targets import Target
from ..tflite import TFLiteModel
from .base import NpuArtifact


class ReferenceCompiler:
    name = "reference"

    def available(self) -> bool:
        return True

    def compile(self, model: TFLiteModel, target: Target) -> NpuArtifact:
        meta = {"compiler": self.name, "target": target.name}
        return NpuArtifact(self.name, pack_reference(model, meta),
                           {"npu_flash_bytes": len(model.buffer)})
