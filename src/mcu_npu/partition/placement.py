"""Which ATen nodes the NPU runs, decided before quantization so the quantizer can compose.

The decision is the plan's (``partition.plan``): a graph quantized with the NPU's rules alone
and lowered to Edge is checked by ``SupportAnalysis`` (and, where it has one, the NPU
compiler's own check). Edge nodes are traced back to their ATen node through the id the
composed quantizer records (``graph.ids.NODE_ID``).

The composed quantizer stamps each node it leaves to the CPU with the verdict that keeps it
there (``stamp_placement``); torch.export and ``to_edge`` carry the stamp to every node the
op becomes, so the Edge program says itself which of its nodes were planned for the CPU
(``Placement.from_program``): no object has to remember it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch.fx import GraphModule

from ..graph.ids import node_id
from .support import SupportAnalysis, Verdict

CPU_KEY = "mcu_npu_cpu"
"""Key in ``node.meta["custom"]``: (node, op, reason, category) of the verdict that keeps the
node's ATen op on the CPU."""


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

    @classmethod
    def from_program(cls, program) -> "Placement":
        """The placement stamped on ``program``'s nodes (``stamp_placement``)."""
        cpu: dict[str, Verdict] = {}
        for node in program.graph.nodes:
            stamp = node.meta.get("custom", {}).get(CPU_KEY)
            ident = node_id(node)
            if stamp is not None and ident is not None and ident not in cpu:
                name, op, reason, category = stamp
                cpu[ident] = Verdict(name, op, False, reason, category)
        return cls(cpu)


def stamp_placement(model: GraphModule, placement: Placement) -> None:
    """Record on every op node of ``model`` whether ``placement`` keeps it on the CPU (any
    earlier stamp is replaced)."""
    for node in model.graph.nodes:
        if node.op != "call_function":
            continue
        custom = node.meta.get("custom")
        verdict = placement.cpu.get(node_id(node))
        if verdict is None:
            if custom:
                custom.pop(CPU_KEY, None)
            continue
        category = verdict.category.value if verdict.category is not None else None
        node.meta.setdefault("custom", {})[CPU_KEY] = (verdict.node, verdict.op,
                                                       verdict.reason, category)
