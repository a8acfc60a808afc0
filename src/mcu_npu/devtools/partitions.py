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
    """Write each NPU partition's TFLite graph (and the graphs its NPU family adds, Vela's
    optimised one for Ethos-U: ``NpuFamily.debug_graphs``) into ``directory`` (made if
    missing); returns the paths written."""
    from ..npu.families import family_of_backend

    files = {}
    for index, backend, graph in partition_graphs(program):  # all made before any is written
        files[f"partition_{index}.tflite"] = graph
        family = family_of_backend(backend)
        if family is not None and family.debug_graphs is not None:
            for suffix, data in family.debug_graphs(graph, _target(report)).items():
                files[f"partition_{index}_{suffix}.tflite"] = data
    return [write_atomic(Path(directory) / name, data) for name, data in files.items()]


def _target(report):
    """The program's target, placed in memory as it was compiled (from its report)."""
    from ..targets import get_target

    if report is None:
        raise HostDataMissingError("Vela's graph is compiled for the program's target, which "
                                   "its report names: keep the .ptd beside the .pte")
    return get_target(report.target).placed((report.placement or {}).get("memory", ""))
