"""Arm Ethos-U: the Vela compiler adapter (``vela``: Vela run in process, ``vela_run``; the
graph rewrites Vela needs, ``vela_graph``; what Vela refuses and why, ``vela_support``), the
payload it writes, the Vela bin stream ``EthosUBackend`` reads (``payload``), how that
runtime moves delegate tensors (``io``), what it and the driver check (``check``) and read
(``runtime``). ``FAMILY`` gathers them for the flow (``npu.family``)."""

from __future__ import annotations

from ...targets import NpuKind
from ..family import NpuFamily, installed_version
from . import check, io, payload, runtime


def _adapter() -> type:
    from .vela import VelaCompiler

    return VelaCompiler


def _version() -> str:
    try:
        from ethosu.vela import __version__
    except ImportError:
        return installed_version("ethos-u-vela")
    return str(__version__)


def _vela_rejections(model, target) -> dict:
    from .vela_support import vela_rejections

    return vela_rejections(model, target)


def _vela_graph(graph: bytes, target) -> dict:
    """Vela's optimised TFLite graph of a partition (``--output-format tflite``), compiled
    for ``target`` (placed in its memory)."""
    from .vela_run import VelaOptions, architecture, build_call, run_vela

    options = VelaOptions()
    call = build_call(architecture(target.npu.vela, options), options, output_format="tflite")
    return {"vela": bytes(run_vela(call, graph)[0].model)}


FAMILY = NpuFamily(
    kind=NpuKind.ETHOS_U, backend_id="EthosUBackend", compiler="vela", adapter=_adapter,
    compiler_version=_version, install_hint="install Arm Vela (pip install ethos-u-vela)",
    input_count=payload.input_count, npu_tensors=io.npu_tensors,
    input_problem=io.input_problem, output_problem=io.output_problem,
    runtime_record=runtime.runtime_record, memory_figures=runtime.memory_figures,
    payload_problems=check.payload_problems, operator_check=_vela_rejections,
    debug_graphs=_vela_graph)
"""The Ethos-U family."""
