"""The reference NPU compiler: no vendor tool; the payload carries the TFLite graph itself,
which the host runtime executes with LiteRT. Used when no vendor SDK is installed.

For a Neutron target the payload also records the format flags a Neutron payload would
carry, so the host copies delegate data exactly as the Neutron runtime would."""

from __future__ import annotations

from ..errors import NpuCompilerError
from ..device.payload import pack_reference
from ..targets import NpuKind, Target
from ..device.tflite_model import TFLiteModel
from .base import NpuArtifact
from .neutron.compiler import runtime_format


class ReferenceCompiler:
    name = "reference"

    def available(self) -> bool:
        return True

    def compile(self, model: TFLiteModel, target: Target) -> NpuArtifact:
        meta = {"compiler": self.name, "target": target.name}
        kind = target.npu.kind
        if kind is NpuKind.NEUTRON:  # the flags the Neutron runtime would read
            meta["neutron_formats"] = {
                "inputs": [runtime_format(s) for s in model.inputs],
                "outputs": [runtime_format(s) for s in model.outputs]}
        elif kind is not NpuKind.ETHOS_U:  # Ethos-U: the runtime copies bytes as they lie
            raise NpuCompilerError(f"target {target.name!r}: no reference payload for a {kind} "
                                   "NPU", tool=self.name)
        return NpuArtifact(self.name, pack_reference(model, meta),
                           {"npu_flash_bytes": len(model.buffer)})
