"""Which layers run with int16 activations and int8 weights (the 16x8 kernels).

A request (``compile(precision=...)``) names a default and per-module or per-node overrides;
``resolve`` turns it into the ATen nodes the quantizer gives int16 activations, and says
why each requested node that cannot have them stays int8: the NPU's converter takes int8
only (eIQ Neutron), the node runs on the Cortex-M CPU (ExecuTorch's Cortex-M backend has
int16 kernels only for quantize, dequantize and div), or its operator has no 16x8
conversion. ``"auto"`` (``AutoPrecision``) is searched by ``mcu_npu.flow.auto_precision``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping

from torch.fx import GraphModule, Node

from ..errors import ConfigError
from ..graph.ids import node_id

INT8, INT16 = "int8", "int16"
PRECISIONS = (INT8, INT16)

CPU_REASON = ("runs on the Cortex-M CPU, whose kernels are int8 here (ExecuTorch's Cortex-M "
              "backend has int16 kernels only for quantize, dequantize and div)")
FOLLOWING_RULES = ("shared", "cat", "split")
"""Annotation rules of data movement: such a node stays in its input's integer type when
its operator converts in both, instead of requantizing to the default."""


@dataclass(frozen=True)
class PrecisionRequest:
    """The integer type of activations: ``default`` everywhere, ``overrides`` by module name
    (``"gru"``, ``"blocks.3"``: every op inside it) or by node name (the report's, or the
    ATen graph's)."""

    default: str = INT8
    overrides: tuple[tuple[str, str], ...] = ()

    @property
    def all_int8(self) -> bool:
        return self.default == INT8 and all(p == INT8 for _, p in self.overrides)

    def to_json(self) -> dict:
        return {"default": self.default, "overrides": dict(self.overrides)}


@dataclass(frozen=True)
class AutoPrecision:
    """Automatic mixed precision: raise the layers that buy the most accuracy per cycle to
    int16 until the accuracy target is met or the budget runs out.

    Target: ``target_sqnr_db`` (SQNR of the host run against the float model), by default
    ``gain_db`` above the int8 program's; or ``accuracy_fn(prog) -> float`` (higher is
    better) reaching ``target_accuracy``. Budget: ``max_cycles`` NPU cycles (Vela's total)
    or ``max_cycles_ratio`` times the int8 program's, and ``max_bytes`` of program plus RAM.
    ``samples``: the inputs accuracy is measured on (default: the calibration set)."""

    target_sqnr_db: float | None = None
    gain_db: float = 6.0
    accuracy_fn: Callable | None = field(default=None, compare=False)
    target_accuracy: float | None = None
    max_cycles: int | None = None
    max_cycles_ratio: float | None = 1.5
    max_bytes: int | None = None
    samples: tuple | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if (self.accuracy_fn is None) != (self.target_accuracy is None):
            raise ConfigError("AutoPrecision: give accuracy_fn and target_accuracy together")
        if self.accuracy_fn is not None and self.target_sqnr_db is not None:
            raise ConfigError("AutoPrecision: give a target SQNR or an accuracy function, "
                              "not both")
        for name in ("max_cycles_ratio", "max_cycles", "max_bytes"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"AutoPrecision: {name} must be positive, not {value!r}")


def parse_precision(precision) -> PrecisionRequest | AutoPrecision:
    """``None``, ``"int8"``, ``"int16"``, ``"auto"``, an ``AutoPrecision``, or
    ``{"default": "int8", "overrides": {name: "int16"}}``."""
    if precision is None:
        return PrecisionRequest()
    if isinstance(precision, (PrecisionRequest, AutoPrecision)):
        return precision
    if precision == "auto":
        return AutoPrecision()
    if isinstance(precision, str):
        return PrecisionRequest(_check(precision, "precision"))
    if not isinstance(precision, Mapping):
        raise ConfigError(f"precision must be 'int8', 'int16', 'auto', an AutoPrecision or a "
                          f"dict {{'default': ..., 'overrides': {{name: ...}}}}, not "
                          f"{type(precision).__name__}")
    unknown = set(precision) - {"default", "overrides"}
    if unknown:
        raise ConfigError(f"precision: unknown key(s) {sorted(unknown)}; the keys are "
                          "'default' and 'overrides'")
    overrides = precision.get("overrides") or {}
    if not isinstance(overrides, Mapping):
        raise ConfigError("precision['overrides'] maps module or node names to 'int8' or "
                          "'int16'")
    for name in overrides:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"precision override names are module or node names, not "
                              f"{name!r}")
    return PrecisionRequest(
        _check(precision.get("default", INT8), "precision['default']"),
        tuple((name, _check(p, f"precision override {name!r}"))
              for name, p in overrides.items()))


def _check(value, what: str) -> str:
    if value not in PRECISIONS:
        raise ConfigError(f"{what} must be 'int8' or 'int16', not {value!r}")
    return value


@dataclass(frozen=True)
class PrecisionChoice:
    """A request resolved on one graph: ``int16`` the ATen node ids that get int16
    activations; ``kept_int8`` node id -> why a node asked for int16 stays int8."""

    request: PrecisionRequest = PrecisionRequest()
    int16: frozenset = frozenset()
    kept_int8: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def asks_int16(self, node: Node) -> bool:
        return node_id(node) in self.int16


def resolve(request: PrecisionRequest, graph: GraphModule, target, on_cpu: Callable[[str], bool],
            edge_names: Mapping[str, str] | None = None) -> PrecisionChoice:
    """The nodes of ATen ``graph`` (tagged, ``graph.ids``) that ``request`` makes int16 on
    ``target``; ``on_cpu(node id)`` says where the plan runs a node, ``edge_names`` maps the
    report's node names to node ids. An override that names nothing is an error."""
    from ..tflite.registry import annotation_rule, takes_int16

    nodes = [n for n in graph.graph.nodes
             if n.op == "call_function" and annotation_rule(n.target) is not None]
    by_name = _names(nodes, edge_names or {})
    wanted: dict[Node, tuple[int, str]] = {}
    for name, precision in request.overrides:
        matches = by_name.get(name)
        if not matches:
            raise ConfigError(f"precision override {name!r} names no module or node of the "
                              f"model; its modules are: {_module_list(nodes)}")
        for node, depth in matches:
            if node not in wanted or wanted[node][0] < depth:
                wanted[node] = (depth, precision)
    int16, kept = set(), {}
    for node in nodes:
        ident = node_id(node) or node.name
        if wanted.get(node, (0, request.default))[1] != INT16:
            continue
        reason = _why_int8(node, ident, target, on_cpu, takes_int16)
        if reason is None:
            int16.add(ident)
        else:
            kept[ident] = reason
    return PrecisionChoice(request, frozenset(int16), MappingProxyType(kept))


def _why_int8(node: Node, ident: str, target, on_cpu, takes_int16) -> str | None:
    if not target.npu.int16_activations:
        return f"the {target.npu.name} compiler takes int8 activations only"
    if on_cpu(ident):
        return CPU_REASON
    if not takes_int16(node):
        op = getattr(node.target, "overloadpacket", node.target)
        return f"no int16 (16x8) conversion for {op} here"
    return None


_NODE = 10_000
"""Specificity of a node-name match: it beats any module, however deep."""


def _names(nodes: list[Node], edge_names: Mapping[str, str]) -> dict[str, list]:
    """Name -> [(node, specificity)]: modules (deeper is more specific) and nodes."""
    index: dict[str, list] = {}
    by_ident = {node_id(n) or n.name: n for n in nodes}
    for node in nodes:
        for depth, path in enumerate(_module_paths(node), start=1):
            index.setdefault(path, []).append((node, depth))
        for name in {node.name, node_id(node)} - {None}:
            index.setdefault(name, []).append((node, _NODE))
    for edge_name, ident in edge_names.items():
        if ident in by_ident and edge_name not in index:
            index[edge_name] = [(by_ident[ident], _NODE)]
    return index


def _module_paths(node: Node) -> list[str]:
    stack = node.meta.get("nn_module_stack") or {}
    return [path for path, _ in stack.values() if isinstance(path, str) and path]


def _module_list(nodes: list[Node]) -> str:
    paths = sorted({p for n in nodes for p in _module_paths(n)})
    return ", ".join(paths[:30]) + (" ..." if len(paths) > 30 else "") if paths else "(none)"


def follows_input(node: Node, int16_input: bool) -> bool:
    """Whether data-movement ``node`` keeps its int16 input's type (rather than the default's
    int8), which it does when its operator converts in int16."""
    from ..tflite.registry import annotation_rule, takes_int16

    return int16_input and annotation_rule(node.target) in FOLLOWING_RULES and \
        takes_int16(node)


__all__ = ["PrecisionRequest", "AutoPrecision", "PrecisionChoice", "parse_precision",
           "resolve", "follows_input", "INT8", "INT16"]
