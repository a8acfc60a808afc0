"""Which operators of a converted partition Vela would leave to the CPU, with Vela's reasons.

Asked of Vela itself, not of a copy of its rules. Vela 5 decides NPU or CPU placement in its
compiler core, Regor, for every Ethos-U. The partition is compiled with TFLite output (which
keeps rejected operators as CPU operators instead of failing) and the optimiser database on.
The database says which source operators reached the NPU command stream; for each operator it
rejects, Regor prints a warning naming the operator's output tensor, then the reason. Some of
its checks (a tensor quantization scale Regor cannot represent, for one) print only the rule
the operator broke, with no warning naming the operator; those lines are the partition's reason
for each rejected operator that has no reason of its own.
"""

from __future__ import annotations

import re

from ai_edge_litert import schema_py_generated as schema

from ...errors import NpuCompilerError
from ...targets import Target
from ...device.tflite_model import TFLiteModel
from .vela_run import TOOL, VelaOptions, architecture, build_call, run_vela

_WARNING = re.compile(r"^Warning \(supported operators\) operator: (?P<op>\w+), "
                      r"ofm: '(?P<ofm>.*)'$")
_REASON = "Reason: "
_LOGGED = re.compile(r"^[A-Z][a-z]+( \(.*?\))?: ")
"""A line of another of Vela's logs (``Warning: ...``, ``Info: ...``), no operator's rule."""
NO_REASON = "Vela places this operator on the CPU and gives no reason"
PARTITION_REASON = "given for the partition, not per operator"


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


def _parse(output: str, loose: frozenset[str] = frozenset()) -> tuple[dict, list[str]]:
    """Regor's warnings: output tensor name -> reason lines, and the lines naming no operator.

    A warning is its header, an optional ``Reason:`` line, then the broken rule (one line, with
    indented lines when the rule has several parts). Any other line names no operator, as does
    any line in ``loose`` (a rule Regor also printed with no warning before it).
    """
    found, headerless, current, rule = {}, [], None, False
    for raw in output.splitlines():
        line = raw.strip()
        match = _WARNING.match(line)
        if match:
            current, rule = match["ofm"], False
            found[current] = []
        elif not line:
            current = None
        elif current is not None and not rule and line.startswith(_REASON):
            found[current].append(line.removeprefix(_REASON))
        elif current is not None and (rule and raw[:1].isspace()
                                      or not rule and line not in loose):
            found[current].append(line)
            rule = True
        elif raw[:1].isspace() and headerless and current is None:
            headerless[-1] += " " + line
        else:
            current = None
            headerless.append(line)
    return found, headerless


def reasons(output: str) -> tuple[dict[str, str], list[str]]:
    """Output tensor name -> Vela's reason, from Regor's supported-operator warnings; and the
    reasons Regor printed with no warning naming an operator, each once, in order."""
    found, headerless = _parse(output)
    if headerless:
        found, headerless = _parse(output, frozenset(headerless))
    named = {ofm: "; ".join(lines) for ofm, lines in found.items() if lines}
    return named, list(dict.fromkeys(line for line in headerless if not _LOGGED.match(line)))


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
    from one node give one entry, their reasons joined. An operator without a warning of its
    own gets the reasons Regor printed naming no operator, marked as the partition's.
    """
    if target.npu.vela is None:
        raise NpuCompilerError(f"target {target.name!r} has no Ethos-U NPU for Vela", tool=TOOL)
    options = options or VelaOptions()
    call = build_call(architecture(target.npu.vela, options), options,
                      output_format="tflite", enable_db=True)
    compiled, output = run_vela(call, model.buffer)
    (why, unnamed), outs = reasons(output), output_names(model.buffer)
    fallback = f"Vela: {'; '.join(unnamed)} ({PARTITION_REASON})" if unnamed else NO_REASON
    rejected: dict[str, list[str]] = {}
    for index in sorted(cpu_operators(compiled.opt_database)):
        node = model.op_origins[index] if index < len(model.op_origins) else f"operator {index}"
        reason = next((why[name] for name in outs[index] if name in why), fallback)
        if reason not in rejected.setdefault(node, []):
            rejected[node].append(reason)
    return {node: "; ".join(texts) for node, texts in rejected.items()}
