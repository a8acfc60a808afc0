"""``NeutronPartitioner``: tags the Edge nodes the NPU runs, keeping each quantized compute
node together with its quantize / dequantize nodes, and records why every other compute
node stays on the CPU."""

from __future__ import annotations

import operator
from typing import Iterable

from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data
from torch.export import ExportedProgram
from torch.fx import Node
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from ..compile_spec import NpuCompileSpec
from ..report import node_macs
from ..targets import Target, get_target
from ..tflite.ops_aliases import DEQUANTIZE, DEQUANTIZE_PER_CHANNEL, QUANTIZE
from ..tflite.registry import PRESERVED_ATEN_OPS
from .support import SupportAnalysis, Verdict

TAG = "mcu_npu_"


class _Members(OperatorSupportBase):
    def __init__(self, members: set[Node]):
        self.members = members

    def is_node_supported(self, submodules, node: Node) -> bool:
        return node in self.members


def cluster_members(analysis: SupportAnalysis) -> set[Node]:
    """Supported compute nodes plus the quantize, dequantize, tuple-access and constant
    nodes that belong with them."""
    members = {n for n in analysis.verdicts if analysis.supported(n)}
    nodes = list(analysis.graph.nodes)
    for node in reversed(nodes):  # dequantize / constant paths: every user is a member
        if node.op != "call_function" or node in members or node in analysis.verdicts:
            continue
        if node.target in DEQUANTIZE + DEQUANTIZE_PER_CHANNEL or analysis.is_constant(node):
            if node.users and all(u in members for u in node.users):
                members.add(node)
    for node in nodes:  # quantize / getitem reading a member's result
        if node.op != "call_function" or node in members:
            continue
        src = node.args[0] if node.args else None
        if (node.target in QUANTIZE or node.target is operator.getitem) and src in members:
            members.add(node)
    return members


class NeutronPartitioner(Partitioner):
    """Delegates to the eIQ Neutron NPU what its converter and limits accept.

    ``operators_not_to_delegate``: op names (``"aten.convolution"`` or ``"convolution"``) or
    node names kept on the CPU. After ``partition`` runs, ``verdicts`` maps node names to
    the placement decision and ``partitions`` maps each tag to its compute node names.
    """

    def __init__(
        self,
        target: str | Target = "imxrt700",
        operators_not_to_delegate: Iterable[str] = (),
        npu_compiler: str = "auto",
    ):
        from ..backend import NeutronBackend

        self.target = get_target(target)
        self.excluded = tuple(operators_not_to_delegate)
        spec = NpuCompileSpec(target=self.target.name, npu_compiler=npu_compiler)
        self.delegation_spec = DelegationSpec(NeutronBackend.__name__, spec.to_compile_specs())
        self.verdicts: dict[str, Verdict] = {}
        self.partitions: dict[str, list[str]] = {}
        self.macs: dict[str, int] = {}

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        analysis = SupportAnalysis(exported_program, self.target, self.excluded)
        gm = exported_program.graph_module
        members = cluster_members(analysis)
        proposed = CapabilityBasedPartitioner(
            gm, _Members(members), allows_single_node_partition=True
        ).propose_partitions()
        order = {n: i for i, n in enumerate(gm.graph.nodes)}
        proposed.sort(key=lambda part: min(order[n] for n in part.nodes))
        tags = {}
        for part in proposed:
            compute = [n for n in part.nodes if n in analysis.verdicts]
            if not compute:
                continue
            tag = f"{TAG}{len(tags)}"
            for node in part.nodes:
                node.meta["delegation_tag"] = tag
            tags[tag] = self.delegation_spec
            self.partitions[tag] = [n.name for n in gm.graph.nodes if n in set(compute)]
        tag_constant_data(exported_program)
        self.verdicts = {n.name: v for n, v in analysis.verdicts.items()}
        self.macs = {n.name: node_macs(n) for n in analysis.verdicts}
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)

    def ops_to_not_decompose(self, ep: ExportedProgram):
        """Keep linear, hardswish and prelu whole when they are quantized (NPU candidates)."""

        def keep(node: Node) -> bool:
            args = [a for a in node.args if isinstance(a, Node)]
            return bool(args) and all("dequantize" in str(a.target) for a in args) and \
                not set(self.excluded) & {node.target.__name__.split(".")[0], str(node.target)}

        return list(PRESERVED_ATEN_OPS), keep
