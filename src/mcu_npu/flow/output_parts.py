"""Split outputs: an output assembled in float from parts of different ranges (a detector's
boxes and scores) leaves the program as its parts, one program output each
(``passes.edge.SplitMixedRangeOutputs``); the report records how ``run`` puts them back
together (``program_io["assemble"]``) and names each part (``program_io["parts"]``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import stage
from ..passes.edge.order import SPLIT_OUTPUTS

if TYPE_CHECKING:
    from ..passes.edge.split_mixed_range_outputs import SplitMixedRangeOutputs


def split_outputs(edge) -> SplitMixedRangeOutputs | None:
    """The pass (``passes.edge.order.SPLIT_OUTPUTS``) run on ``edge``'s one method in place;
    None when nothing was split."""
    if len(edge.methods) != 1:
        return None
    (split_parts,) = SPLIT_OUTPUTS.passes
    split = split_parts()
    with stage("splitting mixed-range outputs into their parts"):
        changed = split(edge.exported_program(next(iter(edge.methods)))).modified
    return split if changed else None


def record_split(report, split: SplitMixedRangeOutputs | None) -> None:
    """The recipe and the parts in ``report.program_io`` (and in ``report.io`` when the
    outputs are int8: ``dequantize_outputs`` assembles after dequantizing), and a note."""
    if split is None:
        return
    report.ops = [o for o in report.ops if o.ident not in split.removed]  # left the program
    report.program_io["assemble"] = split.assemble
    report.program_io["parts"] = split.parts
    if any(o.get("scale") is not None for o in (report.io or {}).get("outputs", [])):
        report.io["assemble"] = split.assemble
    named = ", ".join(f"{p['name']} {tuple(p['shape'])}" for p in split.parts)
    report.notes.append(
        f"the program has {len(split.parts)} outputs for the model's {len(split.assemble)}: "
        f"an output concatenating values of different ranges is returned as its parts, each "
        f"in its own int8 scale ({named}); run() puts them back together, a firmware reads "
        f"the parts (program_io['assemble'] says how they make the model's outputs)")
