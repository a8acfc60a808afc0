"""The Arm Ethos-U adapter: TFLite partition -> Vela -> the Ethos-U runtime's bin stream.

vela_run.py makes the Vela call; this module turns Regor's raw output into the payload the
ExecuTorch Ethos-U runtime reads (``payload``) and Vela's estimates into stats.
"""

from __future__ import annotations

import math


import numpy as np

from ...errors import NpuCompilerError
from ...device.payload import pack_reference
from ...targets import NpuKind, Target
from ...device.tflite_model import TFLiteModel
from . import payload as bin_stream
from ..base import NpuArtifact
from .vela_graph import own_concat_inputs
from .vela_run import TOOL, VelaCall, VelaOptions, architecture, build_call, run_vela, \
    vela_installed
from .vela_support import vela_rejections

__all__ = ["VelaCompiler", "VelaOptions", "vela_stats", "payload_fields"]


def vela_stats(compiled, call: VelaCall, payload_size: int) -> dict:
    """Vela's estimates for one partition: cycles, time at the system clock, memory, MACs."""
    report = compiled.perf_report
    stats = {"npu_cycles": report.npuCycles, "total_cycles": report.totalCycles,
             "inference_time_us": round(report.totalCycles / call.clock_hz * 1e6, 3),
             "clock_hz": int(call.clock_hz), "macs": report.macCount,
             "macs_per_cycle": call.macs_per_cycle, "npu_flash_bytes": payload_size,
             "npu_sram_bytes": 0, "read_only_bytes": report.readOnlyPeakUsage,
             "weights_bytes": report.originalWeights,
             "encoded_weights_bytes": report.encodedWeights,
             "scratch_bytes": compiled.scratch.size,
             "fast_scratch_bytes": compiled.scratch_fast.size, "npu_ops": report.npuOps}
    for name, memory in report.memories.items():
        name = str(name).lower()
        if name not in ("shram", "lutram"):
            stats[f"npu_{name}_bytes"] = memory.peakUsage
    if report.macCount:
        stats["mac_bound_ratio"] = round(
            report.npuCycles / (report.macCount / call.macs_per_cycle), 3)
    layers = layer_cycles(compiled)
    if layers:
        stats["layer_cycles"] = layers
    return stats


def layer_cycles(compiled) -> dict[int, int]:
    """Vela's per-layer cycles (its ``--verbose-performance`` table): index of the operator
    in the TFLite graph compiled -> the cycles of the NPU operations made from it; empty
    when Vela ran without its database (``enable_db``)."""
    tables = compiled.opt_database.tables if compiled.opt_database is not None else {}
    if "perf" not in tables or "source" not in tables:
        return {}
    source = tables["source"]
    index = {row[source.header.index("id")]: int(row[source.header.index("ext_key")])
             for row in source.data}
    perf = tables["perf"]
    at_source, at_cycles = perf.header.index("source_id"), perf.header.index("op_cycles")
    out: dict[int, int] = {}
    for row in perf.data:
        op = index.get(row[at_source])
        if op is not None and row[at_cycles]:
            out[op] = out.get(op, 0) + int(float(row[at_cycles]))
    return out


def payload_fields(compiled) -> bin_stream.VelaBinStream:
    """The bin-stream fields of Regor's raw output."""
    def ios(tensors):
        return tuple(bin_stream.VelaIO(tuple(t.shape), t.element_size, t.address, t.region)
                     for t in tensors)

    return bin_stream.VelaBinStream(
        cmd_data=bytes(compiled.command_stream), weight_data=bytes(compiled.read_only.data),
        scratch_size=compiled.scratch.size, inputs=ios(compiled.inputs),
        outputs=ios(compiled.outputs))


def check_io(model: TFLiteModel, stream: bin_stream.VelaBinStream) -> None:
    """Vela's inputs and outputs must be the partition's, in order, with the same bytes."""
    for kind, specs, ios in (("input", model.inputs, stream.inputs),
                             ("output", model.outputs, stream.outputs)):
        sizes = [_volume(s.shape) * np.dtype(s.dtype).itemsize for s in specs]
        vela_sizes = [_volume(v.shape) * v.elem_size for v in ios]
        if sizes != vela_sizes:
            raise NpuCompilerError(f"Vela's {kind}s ({vela_sizes} bytes) differ from the "
                                   f"partition's ({sizes} bytes)", tool=TOOL)


def _volume(shape) -> int:
    return math.prod(int(d) for d in shape)


class VelaCompiler:
    """Compiles a partition with Arm's Vela into the ExecuTorch Ethos-U runtime's payload."""

    name = "vela"

    def __init__(self, options: VelaOptions | None = None):
        self.options = options or VelaOptions()

    def available(self) -> bool:
        return vela_installed()

    def compile(self, model: TFLiteModel, target: Target) -> NpuArtifact:
        if target.npu.kind is not NpuKind.ETHOS_U or target.npu.vela is None:
            raise NpuCompilerError(f"target {target.name!r} has a {target.npu.kind} NPU; Vela "
                                   "compiles for Arm Ethos-U only", tool=TOOL)
        call = build_call(architecture(target.npu.vela, self.options), self.options,
                          enable_db=True)  # the per-layer cycles (layer_cycles)
        model = own_concat_inputs(model)  # the graph Vela compiles is the one the host runs
        try:
            compiled, _ = run_vela(call, model.buffer)
        except NpuCompilerError as exc:
            raise _with_rejections(exc, model, target, self.options) from exc.__cause__
        stream = payload_fields(compiled)
        check_io(model, stream)
        payload = bin_stream.compose(stream)
        host = pack_reference(model, {"compiler": self.name, "target": target.name})
        return NpuArtifact(self.name, payload, vela_stats(compiled, call, len(payload)), host)


def _with_rejections(exc: NpuCompilerError, model, target, options) -> NpuCompilerError:
    """The error, naming the nodes Vela would leave to the CPU when that is the cause: the
    runtime's raw format holds one NPU command stream, no CPU operators."""
    try:
        rejected = vela_rejections(model, target, options)
    except NpuCompilerError:
        return exc
    if not rejected:
        return exc
    message = exc.args[0].removesuffix("\n" + exc.details) if exc.details else exc.args[0]
    lines = "".join(f"\n  {node}: {reason}" for node, reason in rejected.items())
    return NpuCompilerError(f"{message}\nnodes Vela leaves to the CPU on the "
                            f"{target.npu.name}:{lines}", tool=TOOL, details=exc.details)
