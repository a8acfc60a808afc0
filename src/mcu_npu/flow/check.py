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
from ..estimate.memory import check_fit, memory_report
from ..runtime.pte import Program
from .memory import Lowered


def check_program(placed: Lowered, deployable: bool, strict: bool) -> Program:
    """The three checks of ``placed.buffer`` (lowered from ``placed.edge`` with the plan
    ``placed.decided``; its companion's ``host_data`` give the partitions' graphs; its memory
    report is ``placed.memory`` when the placement already made it), filling the report's
    kernels and memory. Returns the program as read, for the host run (``measure``)."""
    report, target = placed.report, placed.target
    with stage("checking the program's delegate tensors"):
        program = Program(placed.buffer, placed.host_data)  # read once, by the checks below
        check_layouts(program)
    with stage("checking the program against the target's kernels"):
        fill_report(report, program, target, placed.edge,
                    {n.ident: n.node for n in placed.decided.nodes})
        deployability.check(report, target, deployable)
    with stage("checking the program against the target's memory"):
        report.memory = placed.memory if placed.memory is not None else \
            memory_report(program, target, report)
        check_fit(report, strict)
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
