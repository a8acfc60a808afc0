"""Check: the serialized program read back and checked as ``mcu-npu check`` would: every
delegate tensor in the memory order its partition was converted for, every kernel provided
by a library of the target, and the program within the target's memory. A layout problem
is the compiler's own and raises; the others warn, or raise with ``deployable`` and
``strict``."""

from __future__ import annotations

from ..errors import stage
from ..firmware import deployability
from ..firmware.check import io_problems_of, layout_problems
from ..firmware.kernels_list import fill_report
from ..partition.plan import Plan
from ..report import Report
from ..report.memory import check_fit, memory_report
from ..runtime.pte import Program


def check_program(buffer: bytes, host_data: dict[str, bytes], report: Report, target,
                  decided: Plan, edge, deployable: bool, strict: bool,
                  stacklevel: int = 2, memory: dict | None = None) -> Program:
    """The three checks of ``buffer`` (lowered from ``edge`` with the plan ``decided``; its
    companion's ``host_data`` give the partitions' graphs; ``memory``: its memory report
    when the placement already made it),
    filling the report's kernels and memory; warnings point where
    ``warnings.warn(..., stacklevel=stacklevel)`` in the caller would. Returns the program
    as read, for the host run (``measure``)."""
    with stage("checking the program's delegate tensors"):
        program = Program(buffer, host_data)  # read once, by the three checks below
        check_layouts(program)
    with stage("checking the program against the target's kernels"):
        fill_report(report, program, target, edge, {n.ident: n.node for n in decided.nodes})
        deployability.check(report, target, deployable, stacklevel=stacklevel + 1)
    with stage("checking the program against the target's memory"):
        report.memory = memory if memory is not None else memory_report(program, target,
                                                                        report)
        check_fit(report, strict, stacklevel=stacklevel + 1)
    return program


def check_layouts(program: Program) -> None:
    """Every delegate tensor of ``program`` in the memory order its partition was converted
    for, and of the element type and size its device runtime takes: a program that hands
    the NPU a tensor transposed, or one the runtime refuses, is never returned."""
    problems = layout_problems(program)
    if problems:  # an inconsistency of the compiler's own: the stage wraps it, "report it"
        raise RuntimeError(f"{problems[0]}; the NPU would read it transposed "
                           f"({len(problems)} such tensor(s))")
    problems = io_problems_of(program)
    if problems:  # flow.lower moves such partitions to the CPU: reaching here is a bug
        raise RuntimeError(f"{problems[0]} ({len(problems)} such tensor(s))")
