"""Which ATen nodes the NPU runs, decided before quantization so the quantizer can compose.

The decision is the partitioner's: a graph quantized with the NPU's rules alone and lowered
to Edge is checked by ``SupportAnalysis`` (and, where it has one, the NPU compiler's own
check). Edge nodes are traced back to their ATen node through the id the composed quantizer
records (``graph_ids.NODE_ID``). The composed quantizer makes that trial
(``quantization.composed.decide_placement``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ..graph_ids import node_id
from .partitioner import NpuPartitioner
from .support import SupportAnalysis, Verdict


@dataclass(frozen=True)
class Placement:
    """ATen node ids that stay on the CPU, with the verdict that keeps each there; every
    other node is the NPU's."""

    cpu: dict[str, Verdict] = field(default_factory=dict)

    def on_npu(self, ident: str | None) -> bool:
        return ident not in self.cpu

    @classmethod
    def from_analysis(cls, analysis: SupportAnalysis) -> "Placement":
        """An ATen node stays on the CPU when any Edge node it became does."""
        cpu: dict[str, Verdict] = {}
        for node, verdict in analysis.verdicts.items():
            ident = node_id(node)
            if ident is not None and not verdict.supported and ident not in cpu:
                cpu[ident] = verdict
        return cls(cpu)


def analyse_edge(edge_program, target, excluded: Iterable[str] = (),
                 npu_compiler: str = "auto") -> SupportAnalysis:
    """The partitioner's support analysis of an Edge program, the NPU compiler's refusals
    included."""
    partitioner = NpuPartitioner(target, excluded, npu_compiler)
    rejected = partitioner.refine(edge_program)
    return SupportAnalysis(edge_program, partitioner.target, excluded, rejected)

