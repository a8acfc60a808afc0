"""The reference NPU compiler: no vendor tool; the payload carries the TFLite graph itself,
which the host runtime executes with LiteRT. Used when no vendor SDK is installed.

For a Neutron target the payload also records the format flags a Neutron payload would
carry, so the host copies delegate data exactly as the Neutron runtime would."""

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
        if target.npu.kind == "neutron":
            from .neutron import runtime_format

            meta["neutron_formats"] = {
                "inputs": [runtime_format(s) for s in model.inputs],
                "outputs": [runtime_format(s) for s in model.outputs]}
        return NpuArtifact(self.name, pack_reference(model, meta),
                           {"npu_flash_bytes": len(model.buffer)})
