"""Which ATen nodes the NPU runs, decided before quantization so the quantizer can compose.

The decision is the partitioner's: the graph is quantized with the NPU's rules alone,
lowered to Edge, and checked by ``SupportAnalysis`` (and, where it has one, the NPU
compiler's own check). Edge nodes are traced back to their ATen node through the id the
composed quantizer records (``quantization.composed.NODE_ID``). The checks read shapes,
arguments and graph structure, never quantization values, so synthetic inputs decide as well
as calibration data does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Iterable

import torch
from torch.fx import GraphModule

from ..quantization.composed import node_id
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


def synthetic_inputs(model: GraphModule, seed: int = 0) -> tuple:
    """Deterministic inputs shaped like the graph's placeholders (their ``val`` metadata)."""
    gen = torch.Generator().manual_seed(seed)
    inputs = []
    for node in model.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise ValueError(f"input {node.name} has no tensor metadata; export the model "
                             "with torch.export before quantizing")
        if val.dtype.is_floating_point:
            inputs.append(torch.randn(tuple(val.shape), generator=gen).to(val.dtype))
        else:
            inputs.append(torch.zeros(tuple(val.shape), dtype=val.dtype))
    return tuple(inputs)


def analyse_edge(edge_program, target, excluded: Iterable[str] = (),
                 npu_compiler: str = "auto") -> SupportAnalysis:
    """The partitioner's support analysis of an Edge program, the NPU compiler's refusals
    included."""
    from .partitioner import NpuPartitioner

    partitioner = NpuPartitioner(target, excluded, npu_compiler)
    rejected = partitioner.refine(edge_program)
    return SupportAnalysis(edge_program, partitioner.target, excluded, rejected)


def decide_placement(model: GraphModule, target, excluded: Iterable[str] = (),
                     npu_compiler: str = "auto") -> Placement:
    """Trial: quantize a copy of ``model`` with the NPU's rules, lower it, check it."""
    from ..pipeline import to_edge_program
    from ..quantization import NeutronQuantizer, quantize

    trial = copy.deepcopy(model)
    inputs = synthetic_inputs(trial)
    reference = quantize(trial, inputs, [inputs], NeutronQuantizer())
    edge = to_edge_program(reference, inputs)
    return Placement.from_analysis(analyse_edge(edge.exported_program(), target, excluded,
                                                npu_compiler))
