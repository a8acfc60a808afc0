"""The reference NPU compiler: no vendor tool; the payload carries the TFLite graph itself,
which the host runtime executes with LiteRT. Used when no vendor SDK is installed.

The payload also records what the NPU family's runtime reads beside the graph
(``NpuFamily.reference_meta``: for Neutron the format flags a Neutron payload would carry), so
the host copies delegate data exactly as that runtime would."""

from __future__ import annotations

from ..device.payload import pack_reference
from ..targets import Target
from ..device.tflite_model import TFLiteModel
from .base import NpuArtifact
from .families import family


class ReferenceCompiler:
    name = "reference"

    def available(self) -> bool:
        return True

    def compile(self, model: TFLiteModel, target: Target) -> NpuArtifact:
        meta = {"compiler": self.name, "target": target.name,
                **family(target.npu.kind).reference_meta(model)}
        return NpuArtifact(self.name, pack_reference(model, meta),
                           {"npu_flash_bytes": len(model.buffer)})
