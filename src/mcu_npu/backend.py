"""``NeutronBackend.preprocess``: Edge partition -> TFLite int8 -> NPU compiler -> payload.

The class name is the backend id written into the ``.pte``; it matches the name the
ExecuTorch Neutron device runtime registers, so a Neutron payload runs there unchanged.
"""

from __future__ import annotations

from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from torch.export import ExportedProgram

from .compile_spec import NpuCompileSpec
from .npu import get_compiler
from .targets import get_target
from .tflite import convert
from .tflite.describe import op_names


class NeutronBackend(BackendDetails):
    @staticmethod
    def preprocess(edge_program: ExportedProgram, compile_specs) -> PreprocessResult:
        spec = NpuCompileSpec.from_compile_specs(compile_specs)
        target = get_target(spec.target)
        model = convert(edge_program, target)
        artifact = get_compiler(spec.npu_compiler, target).compile(model, target)
        info = {
            "compiler": artifact.compiler,
            "stats": dict(artifact.stats),
            "tflite_ops": op_names(model.buffer),
            "tflite_bytes": len(model.buffer),
        }
        return PreprocessResult(processed_bytes=artifact.payload, _delegate_info_meta=info)
