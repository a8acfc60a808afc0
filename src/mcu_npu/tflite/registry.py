"""The one operator table: for each operator, how it is quantized, whether the NPU takes it and
how it converts, declared together in the operator's file under ``tflite/ops/``.

An entry (``Operator``) names the Edge op overloads it converts, the ATen op packets
(``torch.ops.aten.relu``) whose nodes the quantizer annotates and with which annotation rule,
the checks that say whether it can convert a node (each check's docstring is the user-facing
reason for a rejection) and the conversion. The quantizer, the partitioner, the report and
the converter all read this table; ``operator`` refuses a second entry for an op. An operator
that is annotated but has no converter is an entry with ``convert=None`` and a ``reason``;
they are all declared in ``tflite/ops/annotation_only.py``.

Annotation rules are named (``"unary"``, ``"shared"``, ``"sigmoid"``, ...): the rules
themselves are ``mcu_npu.quantization.annotators.RULES``, which reads this table, so the
converters do not import the quantizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch
from torch.fx import Node

aten = torch.ops.aten

if TYPE_CHECKING:
    from ..targets import Target
    from .context import Context

Check = Callable[[Node, "Target | None"], bool]


@dataclass(frozen=True)
class Operator:
    """One operator: its Edge ops, ATen packets, annotation rule, checks and conversion."""

    targets: tuple
    """Edge op overloads it converts (empty for an annotation-only entry)."""
    convert: Callable[["Context", Node], None] | None
    checks: tuple[Check, ...] = ()
    annotations: tuple[tuple[object, str], ...] = ()
    """(ATen op packet, name of its annotation rule in ``quantization.annotators.RULES``)."""
    preserve: tuple = ()
    """ATen ops kept whole through core-ATen decomposition (they convert better whole)."""
    fuses_into_producer: bool = False
    """A clamp that conv / linear / add run as their fused activation when it is their only
    user: annotated with no quantization in between, converted as the fused activation."""
    reason: str | None = None
    """Why an annotation-only entry has no converter."""
    int16: bool | tuple | Callable[[Node], bool] = False
    """Converts with int16 activations (TFLite's 16x8 kernels, which Vela compiles): True for
    every ATen packet of the entry, the packets that do, or a check of the ATen node (a
    limit of the 16x8 kernel). Others stay int8 when a model asks for int16, with a
    requantize at the boundary."""

    def rejection(self, node: Node, target: Target | None = None) -> str | None:
        """The reason this converter refuses ``node``, or None when it accepts it."""
        for check in self.checks:
            try:
                ok = check(node, target)
            except Exception as exc:  # a check that cannot decide rejects
                return f"{(check.__doc__ or check.__name__).strip()} ({exc})"
            if not ok:
                return (check.__doc__ or check.__name__).strip()
        return None

    @property
    def aten_packets(self) -> tuple:
        return tuple(packet for packet, _ in self.annotations)

    def takes_int16(self, packet, node: Node | None = None) -> bool:
        """Whether ATen op packet ``packet`` (node ``node``) converts with int16 activations."""
        if callable(self.int16):
            return node is None or bool(self.int16(node))
        return self.int16 is True or (isinstance(self.int16, tuple) and packet in self.int16)

    def rule(self, packet) -> str | None:
        """The name of the annotation rule of ATen op packet ``packet``."""
        return dict(self.annotations).get(packet)


OpConverter = Operator  # the former name

REGISTRY: dict[object, Operator] = {}
"""Edge op overload -> its entry (only entries with a converter)."""
ANNOTATIONS: dict[object, Operator] = {}
"""ATen op packet -> the entry that says how it is quantized."""
OPERATORS: list[Operator] = []
"""Every entry, in registration order."""
PRESERVED_ATEN_OPS: list = []
"""ATen ops that core-ATen decomposition would break up but that convert better whole (each
entry's ``preserve``: linear keeps its weight constant and its rank, hardswish and prelu are
single TFLite ops)."""


def register(entry: Operator) -> Operator:
    """Add ``entry`` to the table, refusing an op (Edge or ATen) that already has one."""
    if entry.convert is None and (entry.targets or not entry.reason):
        raise ValueError("an entry without a converter has no Edge ops and gives a reason")
    if not all(isinstance(rule, str) and rule for _, rule in entry.annotations):
        raise ValueError(f"{entry.aten_packets}: annotation rules are named")
    for t in entry.targets:
        if t in REGISTRY:
            raise ValueError(f"{t} already has a converter")
    for p in entry.aten_packets:
        if p in ANNOTATIONS:
            raise ValueError(f"{p} already has an annotation rule")
    for t in entry.targets:
        REGISTRY[t] = entry
    for p in entry.aten_packets:
        ANNOTATIONS[p] = entry
    PRESERVED_ATEN_OPS.extend(op for op in entry.preserve if op not in PRESERVED_ATEN_OPS)
    OPERATORS.append(entry)
    return entry


def _annotations(aten, annotate: str | None) -> tuple:
    if isinstance(aten, dict):  # packet -> rule name
        if annotate is not None:
            raise ValueError("give the rules either in aten={packet: rule} or as annotate=")
        return tuple(aten.items())
    if aten and annotate is None:
        raise ValueError(f"{aten} need an annotation rule (annotate=)")
    return tuple((packet, annotate) for packet in aten)


def operator(*targets, aten: tuple | dict = (), annotate: str | None = None,
             checks: tuple[Check, ...] = (), preserve: tuple = (),
             fuses_into_producer: bool = False,
             int16: bool | tuple | Callable[[Node], bool] = False):
    """Register ``fn(ctx, node)`` as the conversion of Edge ops ``targets``, together with the
    ATen packets ``aten`` the quantizer annotates with rule ``annotate`` (or, per packet,
    ``aten={packet: rule}``), the ``checks`` and whether it converts with int16
    activations (``int16``: True, the ATen packets that do, or a check of the node)."""

    def decorate(fn):
        register(Operator(tuple(targets), fn, tuple(checks), _annotations(aten, annotate),
                          tuple(preserve), fuses_into_producer, int16=int16))
        return fn

    return decorate


def annotated_only(*packets, annotate: str, reason: str) -> Operator:
    """Register ATen packets the quantizer annotates although no converter takes them."""
    return register(Operator((), None, (), _annotations(packets, annotate), reason=reason))


def lookup(target) -> Operator | None:
    """The converter of Edge op ``target`` (``mcu_npu.tflite`` imports them all), if any."""
    return REGISTRY.get(target)


def annotation_rule(target) -> str | None:
    """The name of the annotation rule of an ATen op (overload or packet), if any."""
    packet = getattr(target, "overloadpacket", target)
    entry = ANNOTATIONS.get(packet)
    return None if entry is None else entry.rule(packet)


def takes_int16(node_or_op) -> bool:
    """Whether an ATen node's op converts with int16 activations (given an op, whether it
    can for some node)."""
    node = node_or_op if isinstance(node_or_op, Node) else None
    target = node.target if node is not None else node_or_op
    packet = getattr(target, "overloadpacket", target)
    entry = ANNOTATIONS.get(packet)
    return entry is not None and entry.convert is not None and entry.takes_int16(packet, node)


def fused_clamp(node: Node, *, edge: bool) -> Node | None:
    """The clamp that runs as ``node``'s fused activation: ``node``'s only user, reading it as
    its first argument, whose entry ``fuses_into_producer``. ``edge``: look the user up by
    Edge op (converter, partitioner) or by ATen packet (quantizer)."""
    if len(node.users) != 1:
        return None
    (user,) = node.users
    if user.op != "call_function" or not user.args or user.args[0] is not node:
        return None
    if edge:
        entry = REGISTRY.get(user.target)
    else:
        entry = ANNOTATIONS.get(getattr(user.target, "overloadpacket", user.target))
    return user if entry is not None and entry.fuses_into_producer else None
