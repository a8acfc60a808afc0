"""The kernels a program calls and the library that provides each: what the firmware must
link and register. Read from the ``.pte`` itself (its operator table and delegate ids), so
the list is what the device runtime will look up, not a prediction.

Libraries: ExecuTorch's portable kernels (``kernels/portable``), the quantized kernels
(``kernels/quantized``, ``quantized_decomposed::``), the Cortex-M (CMSIS-NN) kernels
(``backends/cortex_m``, ``cortex_m::``), the prim ops every runtime registers, and one
delegate backend per NPU. A target provides the portable, quantized and prim libraries, the
Cortex-M kernels when its CPU runs them, and its NPU's delegate backend.

``write_selected_ops`` writes ExecuTorch's selective-build operator list with ExecuTorch's own
``gen_oplist``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

PORTABLE = "portable"
QUANTIZED = "quantized"
CORTEX_M = "cortex-m"
PRIM = "prim"
DELEGATE = "delegate"

LIBRARY_NAMES = {
    PORTABLE: "ExecuTorch portable kernels",
    QUANTIZED: "ExecuTorch quantized kernels",
    CORTEX_M: "ExecuTorch Cortex-M (CMSIS-NN) kernels",
    PRIM: "ExecuTorch prim ops (built into the runtime)",
    DELEGATE: "delegate backend",
}

_YAMLS = {
    PORTABLE: ("kernels/portable/functions.yaml", "kernels/portable/custom_ops.yaml",
               "kernels/portable/et_copy_ops.yaml"),
    QUANTIZED: ("kernels/quantized/quantized.yaml",),
    CORTEX_M: ("backends/cortex_m/ops/operators.yaml",),
}

PRIM_OPS = frozenset({
    "aten::sym_size.int", "aten::_local_scalar_dense", "aten::sym_numel",
    "executorch_prim::et_copy_index.tensor", "executorch_prim::et_view.default",
})
"""Operators of ``kernels/prim_ops/register_prim_ops.cpp`` outside ``executorch_prim::``
(every ``executorch_prim::`` operator is one) plus the two tensor ones."""


@dataclass(frozen=True)
class KernelUse:
    """One operator (``ns::name.overload``) or delegate backend id the program calls, the
    library that provides it (``library``: a key of ``LIBRARY_NAMES``), and whether the
    target's libraries have it."""

    op: str
    library: str
    available: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


@functools.lru_cache(maxsize=None)
def library_ops(library: str) -> frozenset[str]:
    """The ``ns::name.overload`` operators a kernel library's ExecuTorch yaml declares."""
    import importlib.util

    # the package's folder, found without importing it (``mcu-npu report`` loads no torch)
    root = Path(next(iter(importlib.util.find_spec("executorch").submodule_search_locations)))
    ops = set()
    for rel in _YAMLS[library]:
        path = root / rel
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            m = re.match(r"-\s+(op|func):\s*([\w:.]+)", line)
            if not m:
                continue
            name = m.group(2)
            ops.add(name if "::" in name else f"aten::{name}")
    return frozenset(ops)


def library_of(op: str) -> str:
    """The library an operator belongs to by its namespace and the libraries' yaml."""
    ns = op.split("::", 1)[0]
    if ns == "executorch_prim" or op in PRIM_OPS:
        return PRIM
    if ns == "cortex_m":
        return CORTEX_M
    if ns == "quantized_decomposed":
        return QUANTIZED
    return PORTABLE


def target_libraries(target) -> tuple[set[str], set[str]]:
    """(kernel libraries, delegate backend ids) a target's firmware can link."""
    from ..npu.families import family

    libraries = {PORTABLE, QUANTIZED, PRIM}
    if target.cpu is not None and target.cpu.int8_kernels:  # backend.cortex_m.cortex_m_core
        libraries.add(CORTEX_M)
    return libraries, {family(target.npu.kind).backend_id}


def available(op: str, library: str, libraries: set[str]) -> bool:
    if library not in libraries:
        return False
    if library == PRIM:
        return True
    return op in library_ops(library)


def program_operators(program) -> tuple[list[str], list[str]]:
    """(operators ``ns::name.overload``, delegate backend ids) of a deserialized program
    (``mcu_npu.runtime.pte.Program``), over all methods, in first-use order."""
    plans = program._pte.program.execution_plan
    ops = [f"{o.name}.{o.overload}" if o.overload else o.name
           for plan in plans for o in plan.operators]
    delegates = [d.id for plan in plans for d in plan.delegates]
    return list(dict.fromkeys(ops)), list(dict.fromkeys(delegates))


def kernel_list(program, target) -> list[KernelUse]:
    """Every operator and delegate ``program`` (a ``runtime.pte.Program``, or the ``.pte``
    bytes, read without torch) calls, with its library and whether ``target`` provides it."""
    from .tables import operators_and_delegates

    libraries, backends = target_libraries(target)
    ops, delegates = operators_and_delegates(program) \
        if isinstance(program, (bytes, bytearray, memoryview)) else program_operators(program)
    uses = []
    for op in ops:
        lib = library_of(op)
        uses.append(KernelUse(op, lib, available(op, lib, libraries)))
    uses += [KernelUse(d, DELEGATE, d in backends) for d in delegates]
    return uses


def op_label(op: str) -> str:
    """``aten::add.out`` -> ``aten.add``: how the report names an op."""
    return op.split(".", 1)[0].replace("::", ".")


def edge_op_nodes(edge, names: dict | None = None) -> dict[str, list[str]]:
    """Operator name (``ns::name``) -> the nodes of a lowered Edge program manager calling it,
    each named by the ATen node it was made from (``names`` maps that node's id to the
    report's node name) when known."""
    from ..graph.ids import node_id

    found: dict[str, list[str]] = {}
    for method in edge.methods:
        for node in edge.exported_program(method).graph.nodes:
            if node.op != "call_function":
                continue
            schema = getattr(node.target, "_schema", None) or \
                getattr(getattr(node.target, "_op", None), "_schema", None)  # Edge op
            if schema is not None:
                ident = node_id(node)
                name = (names or {}).get(ident) or ident or node.name
                callers = found.setdefault(schema.name, [])
                if name not in callers:
                    callers.append(name)
    return found


def problems(uses: list[KernelUse], target, placements=(),
             op_nodes: dict[str, list[str]] | None = None) -> list[str]:
    """One line per operator or delegate ``target`` does not provide, naming the nodes that
    call it: from ``op_nodes`` (``edge_op_nodes``) when given, else the ``placements`` (the
    report's ``OpPlacement``s) of the same op."""
    libraries, backends = target_libraries(target)
    lines = []
    for use in uses:
        if use.available:
            continue
        if use.library == DELEGATE:
            lines.append(f"delegate backend {use.op}: target {target.name} runs "
                         f"{', '.join(sorted(backends))}, not {use.op}")
            continue
        label = op_label(use.op)
        nodes = (op_nodes or {}).get(use.op.split(".", 1)[0]) or \
            [p.node for p in placements if p.op == label or p.op.startswith(label + ".")]
        where = f"node {', '.join(dict.fromkeys(nodes))} ({label})" if nodes else label
        if use.library in libraries:
            why = f"the {LIBRARY_NAMES[use.library]} have no {use.op}"
        else:
            why = (f"{use.op} is one of the {LIBRARY_NAMES[use.library]}, which target "
                   f"{target.name} does not run")
        lines.append(f"{where}: no kernel for {use.op} on {target.name}: {why}")
    return lines


def write_selected_ops(buffer: bytes, path: str | os.PathLike,
                       pte_path: str | os.PathLike | None = None) -> Path:
    """Write ExecuTorch's selective-build operator list (``selected_operators.yaml``) for the
    program in ``buffer``, made by ``executorch.codegen.tools.gen_oplist`` from the ``.pte``
    at ``pte_path`` (``buffer`` saved to a temporary file when None; gen_oplist records the
    file's path as the list's ``debug_info``)."""
    from executorch.codegen.tools.gen_oplist import gen_oplist

    from .files import write_atomic

    path = Path(path)
    with tempfile.TemporaryDirectory() as tmp:
        if pte_path is None:
            pte_path = Path(tmp) / "program.pte"
            pte_path.write_bytes(buffer)
        out = Path(tmp) / "selected_operators.yaml"
        with contextlib.redirect_stdout(io.StringIO()):  # gen_oplist prints its progress
            gen_oplist(output_path=str(out), model_file_path=str(pte_path))
        return write_atomic(path, out.read_bytes())


def fill_report(report, program, target=None, edge=None, names: dict | None = None) -> None:
    """Set ``report.kernels`` and ``report.kernel_problems`` from the serialized program
    (bytes, or a ``mcu_npu.runtime.pte.Program``); ``target`` defaults to the report's;
    ``edge``, the Edge program it was serialized from, names the nodes behind a problem
    (``names``: ATen node id -> the report's node name)."""
    from ..errors import ConfigError
    from ..targets import get_target

    if target is None:
        try:
            target = get_target(report.target)
        except ConfigError:  # a report from a target this mcu-npu does not know
            return
    uses = kernel_list(program, target)
    report.kernels = [u.to_dict() for u in uses]
    report.kernel_problems = problems(uses, target, report.ops,
                                      edge_op_nodes(edge, names) if edge is not None else None)
