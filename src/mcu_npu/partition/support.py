"""Which nodes the NPU takes, and why the others stay on the CPU.

A compute node is delegated when (1) the user did not exclude it, (2) a TFLite converter
exists for its op, (3) it sits in a quantize/dequantize cluster (int8 in, int8 out), and
(4) the converter's checks, which include the target's NPU limits, accept it. The same
registry the converter uses answers (2) and (4); there is no second table of ops.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from enum import Enum
from typing import Iterable

from torch.export import ExportedProgram
from torch.fx import Node

from ..graph.ids import node_id
from ..targets import Target
from ..tflite.ops_aliases import DEQUANTIZE, DEQUANTIZE_PER_CHANNEL, QUANTIZE
from ..tflite.registry import fused_clamp, lookup

QDQ = QUANTIZE + DEQUANTIZE + DEQUANTIZE_PER_CHANNEL


def op_name(node: Node) -> str:
    """``aten.convolution.default`` -> ``aten.convolution``; the name users and reports see."""
    name = getattr(node.target, "__name__", str(node.target))
    return name[: -len(".default")] if name.endswith(".default") else name


def op_aliases(name: str) -> set[str]:
    """The names a user may give ``operators_not_to_delegate`` for op ``name``:
    ``aten.add.Tensor``, ``add.Tensor``, ``aten.add`` and ``add``."""
    parts = name.split(".")
    names = {name, ".".join(parts[1:])}
    if len(parts) == 3:
        names |= {".".join(parts[:2]), parts[1]}
    return names


def _is(node, targets) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


class VerdictCategory(str, Enum):
    """Why a compute node stays on the CPU (``Verdict.category``)."""

    EXCLUDED = "excluded"
    """The user excluded it (``operators_not_to_delegate``)."""
    UNSUPPORTED_OP = "unsupported-op"
    """No TFLite converter for its op."""
    NOT_QUANTIZED = "not-quantized"
    """It does not read and write int8 through quantize / dequantize."""
    NPU_LIMITS = "npu-limits"
    """Its converter's checks, the target's NPU limits among them, refuse it."""
    NPU_COMPILER = "npu-compiler"
    """The NPU compiler refuses it (``NpuPartitioner.refine``)."""
    CONVERSION = "conversion-failed"
    """Its conversion to the NPU's operators failed; the converter's error is the reason."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Verdict:
    """Whether a compute node goes to the NPU; ``reason`` and ``category`` say why not."""

    node: str
    op: str
    supported: bool
    reason: str = ""
    category: VerdictCategory | None = None
    """None when the node goes to the NPU."""

    def __post_init__(self):
        if self.category is not None:  # a category's value is accepted too
            object.__setattr__(self, "category", VerdictCategory(self.category))


@dataclass(frozen=True)
class Rejection:
    """Why a node that passed the checks was moved to the CPU when its partition was
    converted or compiled (``propose.refine``)."""

    reason: str
    category: VerdictCategory = VerdictCategory.NPU_COMPILER


class SupportAnalysis:
    """Placement decisions for every compute node of an Edge program."""

    def __init__(self, program: ExportedProgram, target: Target, excluded: Iterable[str] = (),
                 compiler_rejections: dict[str, str | Rejection] | None = None,
                 placement=None):
        sig = program.graph_signature
        self.constants = {*sig.inputs_to_parameters, *sig.inputs_to_buffers,
                          *sig.inputs_to_lifted_tensor_constants}
        self.target = target
        self.excluded = set(excluded)
        self.compiler_rejections = dict(compiler_rejections or {})
        self.placement = placement  # decided before quantization (partition.placement)
        self.graph = program.graph_module.graph
        self._const_path: dict[Node, bool] = {}
        self.verdicts: dict[Node, Verdict] = {}
        for node in self.graph.nodes:
            if self.is_compute(node):
                self.verdicts[node] = self._verdict(node)
        for node, v in list(self.verdicts.items()):  # a fused clamp left behind unfuses
            users = list(node.users)
            if v.supported and len(users) == 1 and self._fused_clamp(node, users[0]) and \
                    not self.verdicts[users[0]].supported:
                self.verdicts[node] = Verdict(node.name, v.op, False,
                                              "its fused activation stays on the CPU",
                                              self.verdicts[users[0]].category)

    # node kinds ------------------------------------------------------------------------
    def is_constant(self, node) -> bool:
        """A parameter, or anything computed from parameters alone (a permuted weight)."""
        if not isinstance(node, Node):
            return True
        if node not in self._const_path:
            if node.op == "placeholder":
                self._const_path[node] = node.name in self.constants
            elif node.op == "call_function":
                args = node.all_input_nodes
                self._const_path[node] = all(self.is_constant(a) for a in args)
            else:
                self._const_path[node] = False
        return self._const_path[node]

    def is_compute(self, node: Node) -> bool:
        """Nodes the report counts: calls other than quantize/dequantize, tuple access and
        constant folding."""
        return (node.op == "call_function" and node.target not in QDQ
                and node.target is not operator.getitem and not self.is_constant(node))

    # checks ----------------------------------------------------------------------------
    def _fused_clamp(self, producer: Node, act: Node) -> bool:
        """``act`` is a clamp that a conv / linear / add converter fuses into ``producer``."""
        return fused_clamp(producer, edge=True) is act and lookup(producer.target) is not None

    def _reads_int8(self, node: Node, arg: Node) -> bool:
        return _is(arg, DEQUANTIZE + DEQUANTIZE_PER_CHANNEL) or self.is_constant(arg) or \
            self._fused_clamp(arg, node)

    def _writes_int8(self, node: Node) -> bool:
        users = list(node.users)
        if len(users) == 1 and self._fused_clamp(node, users[0]):
            return self._writes_int8(users[0])
        for u in users:
            if u.target is operator.getitem:
                if not all(_is(g, QUANTIZE) for g in u.users):
                    return False
            elif not _is(u, QUANTIZE):
                return False
        return bool(users)

    def _verdict(self, node: Node) -> Verdict:
        name = op_name(node)
        decided = self.placement.cpu.get(node_id(node)) if self.placement is not None else None
        if decided is not None:
            return Verdict(node.name, name, False, decided.reason, decided.category)
        if self.excluded & {*op_aliases(name), node.name, "*"}:
            return Verdict(node.name, name, False, "excluded by operators_not_to_delegate",
                           VerdictCategory.EXCLUDED)
        producer = node.args[0] if node.args else None
        if isinstance(producer, Node) and producer in self.verdicts and \
                self._fused_clamp(producer, node):
            v = self.verdicts[producer]
            return Verdict(node.name, name, v.supported, v.reason, v.category)
        conv = lookup(node.target)
        if conv is None:
            return Verdict(node.name, name, False, f"no NPU conversion for {name}",
                           VerdictCategory.UNSUPPORTED_OP)
        if not all(self._reads_int8(node, a) for a in node.all_input_nodes) or \
                not self._writes_int8(node):
            return Verdict(node.name, name, False,
                           "not quantized: NPU ops need int8 inputs and outputs "
                           "(quantize/dequantize on every tensor edge)",
                           VerdictCategory.NOT_QUANTIZED)
        reason = conv.rejection(node, self.target)
        if reason is not None:
            return Verdict(node.name, name, False, reason, VerdictCategory.NPU_LIMITS)
        rejection = self.compiler_rejections.get(node.name)
        if rejection is not None:
            if isinstance(rejection, str):
                rejection = Rejection(rejection)
            return Verdict(node.name, name, False, rejection.reason, rejection.category)
        return Verdict(node.name, name, True)

    def supported(self, node: Node) -> bool:
        v = self.verdicts.get(node)
        return v is not None and v.supported
