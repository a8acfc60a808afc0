"""The Cortex-M side of a target: what the NPU leaves runs as int8 CMSIS-NN kernels.

After the NPU partitions are delegated, ExecuTorch's Cortex-M pass manager (explicit-layout
pipeline) replaces every remaining quantized pattern that has a Cortex-M kernel by a
``cortex_m::`` op; convolutions run channels-last between explicit transposes, and
quantize/dequantize become the Cortex-M ones. Delegate calls pass through untouched.
"""

from __future__ import annotations

from executorch.exir.pass_base import ExportedProgramPassBase
from executorch.exir.pass_manager import ExportedProgramPassManager
from torch.export import ExportedProgram
from torch.fx import Node

from .errors import ConfigError

NAMESPACE = "cortex_m"


def cortex_m_core(target) -> str | None:
    """The Cortex-M core that runs ``target``'s leftover ops as int8 kernels, if any
    (``CpuSpec.int8_kernels``).

    Only the Neutron SoC has them for now: on Corstone targets, Ethos-U partitions next to
    Cortex-M kernels are not yet validated end to end (their host emulation fails), so
    Corstone keeps the portable kernels for what Vela leaves.
    """
    if target.cpu is None or not target.cpu.int8_kernels:
        return None
    return target.cpu.core


def _target_config(core: str):
    from executorch.backends.cortex_m.target_config import CortexMTargetConfig

    try:
        return CortexMTargetConfig.from_target_string(core)
    except ValueError as exc:
        raise ConfigError(f"no Cortex-M kernels for CPU {core!r}: {exc}") from None


class CortexMLowering(ExportedProgramPassBase):
    """Edge program -> the same program with Cortex-M int8 kernels for the CPU's ops."""

    def __init__(self, core: str):
        self.core = core

    def call(self, exported_program: ExportedProgram):
        from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
        from executorch.exir.pass_base import ExportedProgramPassResult

        lowered = CortexMPassManager(exported_program, target_config=_target_config(self.core),
                                     use_explicit_layout=True).transform()
        return ExportedProgramPassResult(lowered, True)


def cortex_m_passes(core: str) -> ExportedProgramPassManager:
    """``EdgeProgramManager.transform`` argument that lowers the CPU's ops for ``core``."""
    return ExportedProgramPassManager([CortexMLowering(core)])


def lower_to_cortex_m(edge, core: str):
    """``edge`` (an ``EdgeProgramManager``, NPU partitions already delegated) with the CPU's
    quantized ops on Cortex-M kernels."""
    return edge.transform(cortex_m_passes(core))


def is_cortex_m(node: Node) -> bool:
    """A call to a Cortex-M kernel (Edge dialect)."""
    return node.op == "call_function" and \
        getattr(node.target, "namespace", "") == NAMESPACE
