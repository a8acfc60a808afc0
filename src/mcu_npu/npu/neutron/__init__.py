"""NXP eIQ Neutron: the Neutron converter adapter (``compiler``), the payload it writes, what
``NeutronBackend`` reads (``payload``), how that runtime moves delegate tensors (``io``),
what it checks (``check``) and reads (``runtime``), where its SDK comes from (``sdk``).
``FAMILY`` gathers them for the flow (``npu.family``)."""

from __future__ import annotations

from ...targets import NpuKind
from ..family import NpuFamily, installed_version
from . import check, io, payload, runtime
from .sdk import SDK_INDEX, SDK_MODULE, SDK_PACKAGE


def _adapter() -> type:
    from .compiler import NeutronCompiler

    return NeutronCompiler


def _reference_meta(model) -> dict:
    """The format flags the Neutron runtime would read, recorded in a reference payload."""
    from .compiler import runtime_format

    return {"neutron_formats": {"inputs": [runtime_format(s) for s in model.inputs],
                                "outputs": [runtime_format(s) for s in model.outputs]}}


FAMILY = NpuFamily(
    kind=NpuKind.NEUTRON, backend_id="NeutronBackend", compiler="neutron", adapter=_adapter,
    compiler_version=lambda: installed_version(SDK_PACKAGE, SDK_MODULE),
    install_hint=f"install NXP's eIQ Neutron SDK (pip install --index-url {SDK_INDEX} "
                 f"{SDK_PACKAGE})",
    input_count=payload.input_count, npu_tensors=io.npu_tensors,
    input_problem=io.input_problem, output_problem=io.output_problem,
    runtime_record=runtime.runtime_record, memory_figures=runtime.memory_figures,
    payload_problems=check.payload_problems, reference_meta=_reference_meta,
    argument_formats=runtime.argument_formats)
"""The Neutron family."""
