"""Annotation rules: one small function per way of quantizing an operator, by name (``RULES``).

Which ATen ops a rule applies to is declared with the operator itself, in the operator table
(``mcu_npu.tflite.registry``: each entry maps its ATen packets to rule names); this module only
holds the rules and their helpers. A rule receives the node and the quantizer's specs and
writes a ``QuantizationAnnotation`` into ``node.meta``. The rules mirror what TFLite int8
kernels need: conv / linear followed by a clamping activation share one output quantization,
data movement ops reuse their input's parameters, and fixed-range activations get the fixed
parameters.
"""

from __future__ import annotations

import operator
from typing import Callable

import torch
from torch.fx import Node
from torchao.quantization.pt2e.quantizer import (
    QuantizationAnnotation,
    QuantizationSpec,
    SharedQuantizationSpec,
)

from ..graph.schema import bind
from ..passes.aten._recurrent import STATE_KEY
from ..passes.aten.saturate_attention_mask import MASK_KEY
from .qspecs import QuantSpecs

aten = torch.ops.aten
KEY = "quantization_annotation"

Annotator = Callable[[Node, QuantSpecs], None]
RULES: dict[str, Annotator] = {}
"""Rule name (what an operator table entry gives) -> rule."""


def rule(name: str):
    """Register an annotation rule under ``name``, refusing duplicates."""

    def register(fn: Annotator) -> Annotator:
        if name in RULES:
            raise ValueError(f"annotation rule {name!r} already exists")
        RULES[name] = fn
        return fn

    return register


def annotator_of(node: Node) -> Annotator | None:
    """The rule the operator table gives ``node``'s ATen op, if any."""
    from ..tflite.registry import annotation_rule

    name = annotation_rule(node.target)
    return None if name is None else RULES[name]


def __getattr__(name: str):
    if name == "ANNOTATORS":  # ATen packet -> rule, read from the operator table
        from ..tflite.registry import ANNOTATIONS

        return {p: RULES[e.rule(p)] for p, e in ANNOTATIONS.items()}
    raise AttributeError(name)


def packet_of(node: Node):
    target = node.target
    return getattr(target, "overloadpacket", target)


def is_annotated(node: Node) -> bool:
    ann = node.meta.get(KEY)
    return ann is not None and ann._annotated


def _set(node: Node, inputs: dict, output) -> None:
    node.meta[KEY] = QuantizationAnnotation(
        input_qspec_map=inputs, output_qspec=output, _annotated=True
    )


def _output_spec(node: Node):
    ann = node.meta.get(KEY)
    return None if ann is None else ann.output_qspec


def _act_input(producer: Node, specs: QuantSpecs):
    """Spec for an activation input: reuse the producer's parameters when it has them in the
    consumer's integer type; another type (an int8 producer feeding an int16 layer, or the
    reverse) gets the consumer's own parameters, which makes a requantize in between."""
    if _output_spec(producer) is not None and \
            output_dtype(producer) in (None, specs.activation_dtype):
        return SharedQuantizationSpec(producer)
    return specs.activation


def output_dtype(node: Node, _depth: int = 0) -> torch.dtype | None:
    """The integer type ``node``'s output is quantized to, following shared specs to the
    observer they share; None when it is not quantized (yet)."""
    spec = _output_spec(node)
    if spec is None and node.target is operator.getitem and isinstance(node.args[0], Node):
        spec = _output_spec(node.args[0])  # a max-pool's values, say
    return None if spec is None else _spec_dtype(spec, _depth)


def _spec_dtype(spec, depth: int) -> torch.dtype | None:
    if depth > 64:  # sharing chains are short; a longer one is a cycle
        return None
    if isinstance(spec, SharedQuantizationSpec):
        edge_or_node = spec.edge_or_node
        if isinstance(edge_or_node, Node):
            return output_dtype(edge_or_node, depth + 1)
        producer, consumer = edge_or_node
        ann = consumer.meta.get(KEY)
        shared = None if ann is None else ann.input_qspec_map.get(producer)
        return None if shared is None else _spec_dtype(shared, depth + 1)
    return getattr(spec, "dtype", None)


def _tensor_args(node: Node) -> list[Node]:
    return [a for a in node.args if isinstance(a, Node)]


def fused_activation(node: Node) -> Node | None:
    """The not yet annotated clamp that runs fused into ``node`` (the fusion rule of the
    operator table, ``fused_clamp``, which the converter applies too), if any."""
    from ..tflite.registry import fused_clamp

    user = fused_clamp(node, edge=False)
    return user if user is not None and not is_annotated(user) else None


# Convolutions whose following BatchNorm torchao folds itself in QAT (``_fuse_conv_bn_qat``
# after annotation, ``_fold_conv_bn_qat`` in ``convert_pt2e``); in PTQ it is already folded.
CONVS = {aten.conv1d, aten.conv2d, aten.conv_transpose1d, aten.conv_transpose2d}
BATCH_NORMS = {aten.batch_norm}


def batch_norm_after(node: Node) -> Node | None:
    """The BatchNorm that is the only user of conv ``node`` (QAT: not folded yet), if any."""
    if packet_of(node) not in CONVS or len(node.users) != 1:
        return None
    (user,) = node.users
    if user.op == "call_function" and packet_of(user) in BATCH_NORMS and user.args[0] is node:
        return user
    return None


def _annotate_weighted(node: Node, specs: QuantSpecs, weight_axis: int) -> None:
    x, w = node.args[0], node.args[1]
    bias = bind(node).bias
    inputs = {x: _act_input(x, specs), w: specs.weight(weight_axis)}
    if isinstance(bias, Node):
        inputs[bias] = specs.bias((x, node), (w, node))
    bn = batch_norm_after(node)
    if bn is not None:  # conv -> BN [-> clamp]: one output quantization, after BN / the clamp
        _set(node, inputs, None)
        node, inputs = bn, {}
    act = fused_activation(node)
    if act is None:
        _set(node, inputs, specs.activation)
    else:
        _set(node, inputs, None)
        _set(act, {}, specs.activation)


@rule("conv_linear")
def annotate_conv_linear(node: Node, specs: QuantSpecs) -> None:
    """Conv / linear: per-channel weights on axis 0, int32 bias, fused clamp activation."""
    _annotate_weighted(node, specs, weight_axis=0)


@rule("conv_transpose")
def annotate_conv_transpose(node: Node, specs: QuantSpecs) -> None:
    """Transposed conv: weights are [in, out/groups, ...]; output channels sit on axis 1."""
    if bind(node).groups != 1:
        return  # per-channel axis would mix groups; left unquantized, so not delegated
    _annotate_weighted(node, specs, weight_axis=1)


@rule("binary")
def annotate_binary(node: Node, specs: QuantSpecs) -> None:
    """Two-operand arithmetic: every tensor operand and the output get their own parameters."""
    if node.meta.get(MASK_KEY):
        return annotate_masked_add(node, specs)
    inputs = {a: _act_input(a, specs) for a in _tensor_args(node)[:2]}
    if not inputs:
        return
    act = fused_activation(node) if packet_of(node) in (aten.add, aten.add_) else None
    if act is None:
        _set(node, inputs, specs.activation)
    else:
        _set(node, inputs, None)
        _set(act, {}, specs.activation)


def annotate_masked_add(node: Node, specs: QuantSpecs) -> None:
    """Scores plus a 0 / ``finfo.min`` attention mask (``SaturateAttentionMask``): the output
    range covers the kept scores, and the mask is worth more than the scores' span, so
    masked scores saturate to the output's floor."""
    scores, mask = node.args[:2]
    _set(node, {scores: _act_input(scores, specs), mask: specs.attention_mask((scores, node))},
         specs.masked_scores)


@rule("unary")
def annotate_unary(node: Node, specs: QuantSpecs) -> None:
    """Ops whose TFLite kernel requantizes: input and output have independent parameters."""
    x = node.args[0]
    _set(node, {x: _act_input(x, specs)}, specs.activation)


@rule("prelu")
def annotate_prelu(node: Node, specs: QuantSpecs) -> None:
    """PReLU: the slope tensor is an int8 per-tensor constant."""
    x, slope = node.args[0], node.args[1]
    _set(node, {x: _act_input(x, specs), slope: specs.per_tensor_weight}, specs.activation)


def fixed(kind: str) -> Annotator:
    """The rule of a fixed-range activation (``kind`` in ``QuantSpecs.fixed``)."""

    def annotate(node: Node, specs: QuantSpecs) -> None:
        x = node.args[0]
        _set(node, {x: _act_input(x, specs)}, specs.fixed(kind))

    annotate.__name__ = f"annotate_fixed_{kind}"
    annotate.__doc__ = f"{kind}: output parameters fixed by the TFLite int8 kernel."
    return annotate


for _kind in ("sigmoid", "tanh", "softmax"):
    rule(_kind)(fixed(_kind))


@rule("shared")
def annotate_shared(node: Node, specs: QuantSpecs) -> None:
    """Data movement (and clamps, pools): the output reuses the input's parameters."""
    x = node.args[0]
    if not isinstance(x, Node):
        return
    _set(node, {x: _act_input(x, specs)}, SharedQuantizationSpec((x, node)))


@rule("cat")
def annotate_cat(node: Node, specs: QuantSpecs) -> None:
    """Concatenation: TFLite int8 needs every input and the output on one set of parameters."""
    tensors = [t for t in node.args[0] if isinstance(t, Node)]
    if not tensors:
        return
    first = tensors[0]
    inputs = {first: _act_input(first, specs)}
    for t in tensors[1:]:
        inputs.setdefault(t, SharedQuantizationSpec((first, node)))
    _set(node, inputs, SharedQuantizationSpec((first, node)))


@rule("split")
def annotate_split(node: Node, specs: QuantSpecs) -> None:
    """Split: every piece (a getitem of the result) reuses the input's parameters."""
    x = node.args[0]
    _set(node, {x: _act_input(x, specs)}, None)
    for user in node.users:
        if user.target is operator.getitem:
            _set(user, {}, SharedQuantizationSpec((x, node)))


def share_recurrent_states(graph, specs) -> None:
    """Every timestep of one recurrent state, and its initial value, share one observer, so
    the recurrence runs on one scale instead of drifting through per-step ones (and a zero
    initial state does not get a degenerate scale of its own). ``specs``: the
    ``QuantSpecs``, or a function giving the activation spec of a node (its precision)."""
    groups: dict[str, list[Node]] = {}
    for node in graph.nodes:
        ann = node.meta.get(KEY)
        if node.meta.get(STATE_KEY) is not None and ann is not None and \
                ann.output_qspec is not None:
            groups.setdefault((node.meta[STATE_KEY], output_dtype(node)), []).append(node)
    for nodes in groups.values():
        if any(not isinstance(n.meta[KEY].output_qspec, (QuantizationSpec, SharedQuantizationSpec))
               for n in nodes):
            continue  # fixed-range outputs (a tanh state) already share their parameters
        anchor = nodes[0]
        anchor.meta[KEY].output_qspec = specs(anchor) if callable(specs) else specs.activation
        for node in nodes[1:]:
            node.meta[KEY].output_qspec = SharedQuantizationSpec(anchor)
