"""The NPU partitions as TFLite files, for graph viewers (Netron, Model Explorer).

A delegate's payload is opaque to ExecuTorch's tools (Vela's command stream, Neutron
microcode). Behind each one is the partition's int8 TFLite graph: in the payload itself (the
reference compiler's container) or in the program's companion file (``.ptd``). ``export``
writes each as ``partition_<k>.tflite`` and, for an Ethos-U partition, Vela's optimised graph
too (``partition_<k>_vela.tflite``: the operators Vela put on the NPU as one ``ethos-u``
custom operator, anything it left to the CPU as TFLite operators), compiled again with the
target and memory placement of the program.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..device.payload import find_host_graph, is_container, unpack_reference
from ..errors import HostDataMissingError, InvalidProgramError
from ..firmware.files import write_atomic

ETHOS_U = "EthosUBackend"


def partition_graphs(program) -> list[tuple[int, str, bytes]]:
    """(partition index, backend id, TFLite graph) of each NPU delegate call of ``program``
    (``runtime.pte.Program``), in execution order."""
    from ..firmware.check import delegate_calls

    out = []
    for index, backend, data, _, _ in delegate_calls(program):
        graph = data if is_container(data) else find_host_graph(program.named_data, data)
        if graph is None:
            raise HostDataMissingError(
                f"NPU partition {index}'s TFLite graph is kept in the program's companion "
                f"file (.ptd), not in the .pte: keep the .ptd beside the .pte (or give "
                f"--companion / companion=)")
        try:
            model, _ = unpack_reference(graph)
        except InvalidProgramError as exc:
            raise InvalidProgramError(f"NPU partition {index}: {exc}") from None
        out.append((index, backend, model.buffer))
    return out


def export(program, report, directory: str | os.PathLike) -> list[Path]:
    """Write each NPU partition's TFLite graph (and, for Ethos-U, Vela's optimised graph)
    into ``directory`` (made if missing); returns the paths written."""
    files = {}
    for index, backend, graph in partition_graphs(program):  # all made before any is written
        files[f"partition_{index}.tflite"] = graph
        if backend == ETHOS_U:
            files[f"partition_{index}_vela.tflite"] = vela_graph(graph, report)
    return [write_atomic(Path(directory) / name, data) for name, data in files.items()]


def vela_graph(graph: bytes, report) -> bytes:
    """Vela's optimised TFLite graph of ``graph``, compiled for the report's target and
    memory placement (Vela's ``--output-format tflite``)."""
    from ..npu.ethos_u.vela_run import VelaOptions, architecture, build_call, run_vela
    from ..targets import get_target

    if report is None:
        raise HostDataMissingError("Vela's graph is compiled for the program's target, which "
                                   "its report names: keep the .ptd beside the .pte")
    target = get_target(report.target).placed((report.placement or {}).get("memory", ""))
    options = VelaOptions()
    call = build_call(architecture(target.npu.vela, options), options, output_format="tflite")
    compiled, _ = run_vela(call, graph)
    return bytes(compiled.model)
