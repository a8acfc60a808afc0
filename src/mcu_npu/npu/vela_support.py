"""Which operators of a converted partition Vela would leave to the CPU, with Vela's reasons.

Asked of Vela itself, not of a copy of its rules. Vela 5 decides NPU or CPU placement in its
compiler core, Regor, for every Ethos-U. The partition is compiled with TFLite output (which
keeps rejected operators as CPU operators instead of failing) and the optimiser database on.
The database says which source operators reached the NPU command stream; for each operator it
rejects, Regor prints a warning naming the operator's output tensor, then the reason.
"""

from __future__ import annotations

import re

from ai_edge_litert import schema_py_generated as schema

from ..errors import NpuCompilerError
from ..targets import Target
from ..device.tflite_model import TFLiteModel
from .vela_run import TOOL, VelaOptions, architecture, build_call, run_vela

_WARNING = re.compile(r"^Warning \(supported operators\) operator: (?P<op>\w+), "
                      r"ofm: '(?P<ofm>.*)'$")
_REASON = "Reason: "
NO_REASON = "Vela places this operator on the CPU and gives no reason"


def _column(table, name: str) -> list[str]:
    if name not in table.header:
        raise NpuCompilerError(f"Vela's optimiser database has no column {name!r}", tool=TOOL,
                               details=f"columns: {table.header}")
    at = table.header.index(name)
    return [row[at] for row in table.data]


def cpu_operators(database) -> set[int]:
    """Indices of the input's TFLite operators Vela runs on the CPU.

    Read as Vela's own CPU-operator report reads the database: an operation that is neither
    queued in the command stream nor part of a fused group runs on the CPU. ``ext_key`` of
    the source table is the operator's index in the input subgraph.
    """
    tables = database.tables
    queued = set(_column(tables["queue"], "optimised_id"))
    grouped = set(_column(tables["group"], "id"))
    source = dict(zip(_column(tables["source"], "id"), _column(tables["source"], "ext_key")))
    perf = tables["perf"]
    rows = zip(_column(perf, "id"), _column(perf, "optimised_id"), _column(perf, "source_id"))
    return {int(source[src]) for op, opt, src in rows
            if opt not in queued and op not in grouped and src in source}


def reasons(output: str) -> dict[str, str]:
    """Output tensor name -> Vela's reason, from Regor's supported-operator warnings."""
    found, current = {}, None
    for line in output.splitlines():
        match = _WARNING.match(line.strip())
        if match:
            current = match["ofm"]
            found[current] = []
        elif current is not None and line.strip():
            found[current].append(line.strip().removeprefix(_REASON))
        else:
            current = None
    return {ofm: "; ".join(lines) for ofm, lines in found.items() if lines}


def output_names(tflite: bytes) -> list[list[str]]:
    """The output tensor names of each operator of subgraph 0."""
    graph = schema.Model.GetRootAs(tflite, 0).Subgraphs(0)
    ops = (graph.Operators(i) for i in range(graph.OperatorsLength()))
    return [[graph.Tensors(op.Outputs(j)).Name().decode() for j in range(op.OutputsLength())]
            for op in ops]


def vela_rejections(model: TFLiteModel, target: Target,
                    options: VelaOptions | None = None) -> dict[str, str]:
    """Graph node name -> Vela's reason, for each operator Vela would not put on the NPU.

    Empty when Vela places the whole partition on the NPU. Several rejected TFLite operators
    from one node give one entry, their reasons joined.
    """
    if target.npu.vela is None:
        raise NpuCompilerError(f"target {target.name!r} has no Ethos-U NPU for Vela", tool=TOOL)
    options = options or VelaOptions()
    call = build_call(architecture(target.npu.vela, options), options,
                      output_format="tflite", enable_db=True)
    compiled, output = run_vela(call, model.buffer)
    why, outs = reasons(output), output_names(model.buffer)
    rejected: dict[str, list[str]] = {}
    for index in sorted(cpu_operators(compiled.opt_database)):
        node = model.op_origins[index] if index < len(model.op_origins) else f"operator {index}"
        reason = next((why[name] for name in outs[index] if name in why), NO_REASON)
        if reason not in rejected.setdefault(node, []):
            rejected[node].append(reason)
    return {node: "; ".join(texts) for node, texts in rejected.items()}
