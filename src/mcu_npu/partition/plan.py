"""One placement plan: which node runs where and why, decided once and never mutated.

``flow.place.plan(aten_graph, target, options)`` makes the trial the composed
quantizer and the partitioner used to make each on its own: quantize a copy with the NPU's
rules alone, lower it to Edge, run the support checks and the NPU compiler's own check
(``plan_program``), and record the outcome as a frozen ``Plan``. ``plan_program(edge_program,
target, options)`` is that decision for an Edge program (what the partitioner runs when it
is given no plan describing the program).

The quantizer (``TargetQuantizer(target, plan=...)``), the partitioner
(``NpuPartitioner(plan=...)``) and the report (``flow.report.build_report(plan, edge)``)
take the plan as an argument. A plan records the fingerprint of the graph it was made for,
so it is only applied to that graph: a quantizer or partitioner handed another graph plans
it afresh (the quantizer with its planner) instead of applying a stale decision. The
ATen-level decision travels with the graph itself: the quantizer stamps each CPU node
(``placement.stamp_placement``), and the Edge program's plan reads the stamps back
(``Placement.from_program``).

(The trial quantizes and lowers, so it lives in the compile flow, above both the quantizers
and the partitioner: ``mcu_npu.quantization`` reads plans from ``mcu_npu.partition``, and
neither reaches up into ``mcu_npu.flow``.)
"""

from __future__ import annotations

import hashlib
import operator
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

import torch
from torch.export import ExportedProgram
from torch.fx import Graph, GraphModule

from ..errors import ConfigError
from ..graph.ids import node_id
from ..graph.macs import node_macs
from ..targets import Target, get_target
from .propose import is_pass_through, settle
from .placement import Placement
from .subgraph import nearest_upstream
from .support import Rejection, Verdict


@dataclass(frozen=True)
class PlanOptions:
    """What a plan is decided with besides the graph and the target.

    ``operators_not_to_delegate``: op or node names kept on the CPU (``"*"``: every op);
    ``npu_compiler``: the NPU compiler the partitions go to (``"auto"``, the vendor's, or
    ``"reference"``); ``calibration``: input tuples the trial quantization calibrates on
    (None: deterministic synthetic inputs; the checks read shapes, arguments and graph
    structure, never quantization values, so both decide alike); ``calibration_method``:
    how the trial quantization chooses activation ranges (``quantization.calibration``;
    the plan does not depend on it, and a trial kept as the compile's result has it);
    ``bias_correction``: the trial quantization corrects layer biases
    (``quantization.calibration.bias_correction``), likewise."""

    operators_not_to_delegate: tuple[str, ...] = ()
    npu_compiler: str = "auto"
    calibration: tuple | None = field(default=None, compare=False, repr=False)
    calibration_method: str = field(default="minmax", compare=False)
    bias_correction: bool = field(default=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "operators_not_to_delegate",
                           tuple(self.operators_not_to_delegate))
        if self.calibration is not None:
            object.__setattr__(self, "calibration", tuple(
                (s,) if isinstance(s, torch.Tensor) else tuple(s) for s in self.calibration))


@dataclass(frozen=True)
class NodePlan:
    """One compute node of the planned Edge program: its verdict (with the reason when it
    stays on the CPU), where it runs, its MACs and the ATen node it came from."""

    node: str
    op: str
    ident: str | None
    verdict: Verdict
    partition: int | None
    macs: int
    inputs: tuple[str, ...] = ()
    """The compute nodes whose results reach this one (through quantize, dequantize and
    views): the edges of the report's placement graph."""
    bits: int | None = None
    """Bits of the integer type the node's output is quantized to (8, 16); None when float."""

    @property
    def runs_on(self) -> str:
        return "cpu" if self.partition is None else "npu"


@dataclass(frozen=True)
class Plan:
    """Where every compute node runs, decided once for one graph.

    ``fingerprint``: the graph the plan was made for (the ATen graph the quantizer annotates
    for ``plan``, the Edge program for ``plan_program``); ``edge_fingerprint``: the Edge
    program ``nodes`` and ``partitions`` describe (the trial's, for ``plan``);
    ``placement``: the ATen node ids that stay on the CPU, with their verdicts;
    ``nodes``: every compute node of that Edge program; ``partitions``: the compute node
    names of each NPU partition, ``members`` every node each one delegates (quantize /
    dequantize included); ``compiler_rejections``: Edge node name -> why the node was moved
    to the CPU when its partition was converted or compiled (``propose.refine``); ``portable``: ATen node id of a CPU node -> why the target's
    Cortex-M kernels cannot take it (it runs as a portable float kernel; empty where the
    target has no Cortex-M kernels or the plan was made from an Edge program alone)."""

    target: Target
    options: PlanOptions
    fingerprint: str
    edge_fingerprint: str
    placement: Placement
    nodes: tuple[NodePlan, ...]
    partitions: tuple[tuple[str, ...], ...]
    members: tuple[tuple[str, ...], ...] = field(repr=False)
    compiler_rejections: Mapping[str, Rejection] = field(default_factory=dict, repr=False)
    portable: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def verdicts(self) -> dict[str, Verdict]:
        return {n.node: n.verdict for n in self.nodes}

    @property
    def macs(self) -> dict[str, int]:
        return {n.node: n.macs for n in self.nodes}

    @property
    def node_ids(self) -> dict[str, str | None]:
        return {n.node: n.ident for n in self.nodes}

    def made_for(self, graph) -> bool:
        """Whether the plan was made for ``graph`` (a GraphModule, ExportedProgram or Edge
        program manager)."""
        return fingerprint(graph) == self.fingerprint

    def describes(self, program) -> bool:
        """Whether ``nodes`` and ``partitions`` are those of Edge program ``program``."""
        return fingerprint(program) == self.edge_fingerprint


def _graph(obj) -> Graph:
    if isinstance(obj, Graph):
        return obj
    if isinstance(obj, (GraphModule, ExportedProgram)):
        return obj.graph
    if hasattr(obj, "exported_program"):  # EdgeProgramManager
        return obj.exported_program().graph
    raise ConfigError(f"cannot plan a {type(obj).__name__}: give a torch.fx GraphModule, an "
                      "ExportedProgram or an Edge program")


def fingerprint(obj) -> str:
    """A digest of a graph's structure: every node's kind, name, op, inputs and (for tensors)
    shape and dtype. Copies of a graph (ExecuTorch's fake-weight copy among them) share it;
    any other graph has another. Weight values are not part of it (the fake copy has none):
    the support checks read shapes, arguments and structure."""
    h = hashlib.sha256()
    for node in _graph(obj).nodes:
        val = node.meta.get("val")
        shape = (tuple(val.shape), str(val.dtype)) if isinstance(val, torch.Tensor) else ""
        h.update(f"{node.op}|{node.name}|{node.target}|"
                 f"{[str(a) for a in node.all_input_nodes]}|{shape};".encode())
    return h.hexdigest()


def plan_program(program, target, options: PlanOptions = PlanOptions(),
                 placement: Placement | None = None,
                 rejected: Mapping[str, Rejection] | None = None) -> Plan:
    """The partitioner's decision for Edge program ``program`` (real weights needed): the
    support checks, the conversion of every proposed partition and the NPU compiler's check
    of it, the partitions. ``placement`` defaults to the one stamped on the program's nodes
    by the composed quantizer (none: every node is the checks'); ``rejected`` (Edge node
    name -> why) are nodes already moved to the CPU (a partition the NPU compiler failed
    on)."""
    if hasattr(program, "exported_program"):
        program = program.exported_program()
    target = get_target(target)
    if placement is None:
        placement = Placement.from_program(program)
    excluded = options.operators_not_to_delegate
    rejected, analysis, groups = settle(program, target, excluded, options.npu_compiler,
                                        placement, rejected)
    where = {n: k for k, group in enumerate(groups) for n in group}
    nodes = tuple(NodePlan(n.name, v.op, node_id(n), _why_left(n, v, where), where.get(n),
                           node_macs(n), _compute_inputs(n, analysis.verdicts),
                           activation_bits(n))
                  for n, v in analysis.verdicts.items())
    fp = fingerprint(program)
    return Plan(target, options, fp, fp, Placement.from_analysis(analysis), nodes,
                tuple(tuple(n.name for n in g if n in analysis.verdicts) for g in groups),
                tuple(tuple(n.name for n in g) for g in groups),
                MappingProxyType(dict(rejected)))


PASS_THROUGH_REASON = ("a view of data from outside the NPU partition that also leaves it: "
                       "nothing for the NPU to compute, so it stays a view on the CPU")


def _why_left(node, verdict: Verdict, where) -> Verdict:
    """``verdict``, with the reason a supported view or copy was left out of every partition
    (``propose.is_pass_through``)."""
    if verdict.supported and node not in where and is_pass_through(node):
        return replace(verdict, reason=PASS_THROUGH_REASON)
    return verdict


def activation_bits(node) -> int | None:
    """Bits of the quantize that reads ``node``'s output, that of its only user (a clamp
    fused into it) or of its pieces (a split); None when the output stays float."""
    from ..tflite.ops_aliases import QUANTIZE

    pieces = [u for u in node.users if u.target is operator.getitem]  # a split's outputs
    for candidate in (node, *(list(node.users) if len(node.users) == 1 else []), *pieces):
        for user in candidate.users:
            if user.op == "call_function" and user.target in QUANTIZE and len(user.args) > 5:
                return torch.iinfo(user.args[5]).bits
    return None


def _compute_inputs(node, compute) -> tuple[str, ...]:
    """Names of the nodes of ``compute`` that feed ``node``, looking through the others."""
    return tuple(sorted(n.name for n in nearest_upstream(node.all_input_nodes, compute)))


__all__ = ["Plan", "PlanOptions", "NodePlan", "plan_program", "fingerprint"]
