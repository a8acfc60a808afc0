"""Shared machinery of the recurrent-op passes (aten.gru/rnn_tanh/rnn_relu/lstm ``.input``).

``RecurrentCall`` reads one such node (flat weight list, flags, static shapes); ``Emitter``
inserts new ATen nodes and gives each a fake-tensor ``meta["val"]`` so later passes (and a
second pass of this family) still know shapes, and ``constant_attr`` adds a constant; ``decompose_recurrent`` unrolls every layer
and direction over time around a per-gate-type cell function, with the input projection
of the whole sequence hoisted into one ``aten.linear`` per layer and direction. A cell may
have that projection cut into gate groups once, outside the loop (``Cell.input_groups``), so
each step reads its gates with one ``select`` each: one slice per read is what an NPU
compiler folds into the consumer's addressing, where a select followed by a slice is a copy.
"""

from __future__ import annotations

import operator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.fx import Graph, GraphModule, Node

from ...upstream.private import detect_fake_mode, pytree
from mcu_npu.errors import UnsupportedModelError
from mcu_npu.graph.fake_values import memo_of
from mcu_npu.graph.schema import bind

aten = torch.ops.aten

_COPIED_META = ("nn_module_stack", "stack_trace")

STATE_KEY = "mcu_npu_recurrent_state"
"""Node meta naming the recurrent state a node produces (call/layer/direction/state index);
the quantizer gives every timestep of one state the same quantization parameters."""

STATE_OF = "mcu_npu_state_of"
"""Node meta of a recurrent layer's or cell's final state: the node of the initial state it
continues (``hx``), so a program that takes its state as an input and returns the new one
can quantize the pair alike (``flow.state.io_state_pairs``). A name: a node in meta
would be copied with every copy of the graph."""


class ProjSizeNotSupportedError(UnsupportedModelError, NotImplementedError):
    """An LSTM with ``proj_size > 0`` was given; only ``proj_size == 0`` is handled."""


PROJ_SIZE_MESSAGE = (
    "LSTM with proj_size > 0 is not supported: build the LSTM with proj_size=0 "
    "(add an nn.Linear after it if a smaller output is needed) and retrain, "
    "or leave the model's aten.lstm to a backend that runs it as is."
)


def static_shape(node: Node, gm: GraphModule | None = None) -> tuple[int, ...]:
    """Static shape of a tensor node, from ``meta["val"]`` or the module attribute it names."""
    val = node.meta.get("val")
    if val is None and gm is not None and node.op == "get_attr":
        val = operator.attrgetter(node.target)(gm)
    if not isinstance(val, torch.Tensor):
        raise UnsupportedModelError(
            f"{node.format_node()} has no shape metadata; run the pass on a graph from torch.export"
        )
    shape = tuple(val.shape)
    if not all(isinstance(s, int) for s in shape):
        raise UnsupportedModelError(f"{node.name} has dynamic shape {shape}; recurrent ops need static shapes")
    return shape


@dataclass
class RecurrentCall:
    """One ``aten.{gru,rnn_tanh,rnn_relu,lstm}.input`` node, its weights and flags."""

    node: Node
    input: Node
    hx: tuple[Node, ...]
    params: tuple[Node, ...]
    has_biases: bool
    num_layers: int
    dropout: float
    train: bool
    bidirectional: bool
    batch_first: bool

    @classmethod
    def from_node(cls, node: Node) -> "RecurrentCall":
        a = vars(bind(node))
        hx = a["hx"]
        call = cls(
            node=node, input=a["input"], hx=tuple(hx) if isinstance(hx, (list, tuple)) else (hx,),
            params=tuple(a["params"]), has_biases=bool(a["has_biases"]), num_layers=int(a["num_layers"]),
            dropout=float(a["dropout"]), train=bool(a["train"]), bidirectional=bool(a["bidirectional"]),
            batch_first=bool(a["batch_first"]),
        )
        if len(call.params) != call.num_layers * call.num_directions * call.params_per_cell:
            if node.target == aten.lstm.input:
                raise ProjSizeNotSupportedError(PROJ_SIZE_MESSAGE)
            raise UnsupportedModelError(f"{node.name}: unexpected number of weights {len(call.params)}")
        return call

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def params_per_cell(self) -> int:
        return 4 if self.has_biases else 2

    @property
    def time_dim(self) -> int:
        return 1 if self.batch_first else 0

    @property
    def applies_dropout(self) -> bool:
        return self.train and self.dropout > 0

    def cell_params(self, layer: int, direction: int) -> tuple[Node, Node, Node | None, Node | None]:
        """``(w_ih, w_hh, b_ih, b_hh)`` of one layer and direction (biases None without bias)."""
        k = self.params_per_cell
        start = (layer * self.num_directions + direction) * k
        group = self.params[start:start + k]
        return (group[0], group[1], group[2], group[3]) if self.has_biases else (group[0], group[1], None, None)

    def layer_params(self, layer: int) -> list[Node]:
        """The flat weight list of one layer, all directions, as a single-layer call takes it."""
        k = self.params_per_cell * self.num_directions
        return list(self.params[layer * k:(layer + 1) * k])


class Emitter:
    """Inserts ATen calls before a node, copying its provenance and computing fake ``val``s."""

    def __init__(self, graph: Graph, source: Node):
        self.graph = graph
        self.source = source

    def __call__(self, op: Callable, *args) -> Node:
        with self.graph.inserting_before(self.source):
            node = self.graph.call_function(op, tuple(args))
        for key in _COPIED_META:
            if key in self.source.meta:
                node.meta[key] = self.source.meta[key]
        val = fake_value(op, tuple(args))
        if val is not None:
            node.meta["val"] = val
        return node


def constant_attr(gm: GraphModule, near: Node, name: str, value: torch.Tensor) -> Node:
    """A new constant of ``gm`` and the ``get_attr`` node reading it. A parameter, as a
    convolution's weight is: ``prepare_pt2e`` folds a following BatchNorm into the
    convolution by re-registering its weight and bias as parameters under the same names."""
    name = "_mcu_npu_" + name
    gm.register_parameter(name, torch.nn.Parameter(value, requires_grad=False))
    with gm.graph.inserting_before(near):
        node = gm.graph.get_attr(name)
    mode = next((getattr(a.meta.get("val"), "fake_mode", None) for a in near.all_input_nodes
                 if getattr(a.meta.get("val"), "fake_mode", None) is not None), None)
    node.meta["val"] = mode.from_tensor(value, static_shapes=True) if mode is not None else value
    return node


def fake_value(op: Callable, args: Sequence, kwargs: dict | None = None):
    """``op`` run on the fake ``meta["val"]`` of its node arguments; None when one is missing.
    A repeated fresh-tensor call is made from its first value (``graph.fake_values.memo_of``)."""
    missing = object()
    vals, kvals = pytree.tree_map_only(Node, lambda n: n.meta.get("val", missing),
                                       (tuple(args), dict(kwargs or {})))
    flat = pytree.tree_leaves((vals, kvals))
    if any(v is missing for v in flat):
        return None
    mode = detect_fake_mode(flat)
    if mode is None:
        return None
    with mode:
        return memo_of(mode).call(op, vals, kvals, lambda: op(*vals, **kvals))


def is_call(node, target) -> bool:
    """``node`` is a graph node calling ``target``."""
    return isinstance(node, Node) and node.op == "call_function" and node.target == target


def cat_parts(cat: Node) -> tuple[list, int]:
    """The pieces of ``aten.cat`` node ``cat`` and its axis, made non-negative."""
    dim = bind(cat).dim
    return list(cat.args[0]), dim % len(static_shape(cat))


def replace_outputs(gm: GraphModule, node: Node, outputs: Sequence[Node]) -> None:
    """Route every ``getitem(node, i)`` to ``outputs[i]`` and erase ``node``."""
    for user in list(node.users):
        if user.op != "call_function" or user.target is not operator.getitem:
            raise UnsupportedModelError(f"{node.name} is used by {user.format_node()}, expected getitem")
        user.replace_all_uses_with(outputs[user.args[1]])
        gm.graph.erase_node(user)
    gm.graph.erase_node(node)


_PENDING: ContextVar[dict | None] = ContextVar("mcu_npu_pending_recompiles", default=None)


def finish(gm: GraphModule) -> None:
    """Check the edited graph and regenerate the module's code (inside ``one_recompile``:
    when the sequence of passes ends)."""
    gm.graph.lint()
    pending = _PENDING.get()
    if pending is None:
        gm.recompile()
    else:
        pending[id(gm)] = gm


@contextmanager
def one_recompile():
    """Within, ``finish`` leaves each edited module's code to be regenerated once, on the
    way out: a sequence of passes that only edit graphs (none runs a module) pays for one
    code generation of the graph instead of one per pass, which on an unrolled recurrent
    graph of thousands of nodes is most of what the passes cost."""
    pending: dict = {}
    token = _PENDING.set(pending)
    try:
        yield
    finally:
        _PENDING.reset(token)
        for gm in pending.values():
            gm.recompile()


def replace_by_first_output(gm: GraphModule, node: Node, out: Node, items: bool) -> None:
    """Make ``out`` what ``node`` was and erase ``node``; with ``items``, ``node`` is a tuple
    of which only item 0 is read (a native norm's statistics unused), so its ``getitem``
    users are replaced and erased too."""
    if items:
        for user in list(node.users):
            user.replace_all_uses_with(out)
            gm.graph.erase_node(user)
    node.replace_all_uses_with(out)
    gm.graph.erase_node(node)


def replace_nodes(gm: GraphModule, select: Callable[[Node], bool],
                  rewrite: Callable[[GraphModule, Node], Node]) -> bool:
    """Replace each node ``select`` accepts by ``rewrite(gm, node)`` (the node its users read
    instead); True if any was replaced."""
    work = [n for n in gm.graph.nodes if select(n)]
    for node in work:
        node.replace_all_uses_with(rewrite(gm, node))
        gm.graph.erase_node(node)
    if work:
        finish(gm)
    return bool(work)


# A cell maps (emit, input projection of one step, recurrent projection, state, hidden) to the
# new state; state[0] is the hidden state that is also the step's output. A cell with an
# ``input_groups`` attribute (a tuple of (first gate, gate count)) gets the step's input
# projection as a tuple, one node per group, cut from the sequence projection once.
Cell = Callable[[Emitter, Node, Node, tuple[Node, ...], int], tuple[Node, ...]]


def decompose_recurrent(gm: GraphModule, call: RecurrentCall, cell: Cell) -> list[Node]:
    """Unroll ``call`` into elementary ops; returns ``[output, *final_states]``."""
    emit = Emitter(gm.graph, call.node)
    seq_len = static_shape(call.input)[call.time_dim]
    td = call.time_dim
    x = call.input
    finals: list[list[Node]] = [[] for _ in call.hx]
    for layer in range(call.num_layers):
        outputs = []
        for direction in range(call.num_directions):
            w_ih, w_hh, b_ih, b_hh = call.cell_params(layer, direction)
            hidden = static_shape(w_hh, gm)[1]
            x_proj = emit(aten.linear.default, x, w_ih, b_ih)
            groups = getattr(cell, "input_groups", None)
            if groups is not None:
                x_proj = tuple(emit(aten.slice.Tensor, x_proj, -1, first * hidden,
                                    (first + count) * hidden) for first, count in groups)
            index = layer * call.num_directions + direction
            state = tuple(emit(aten.select.int, h, 0, index) for h in call.hx)
            for i, s in enumerate(state):
                s.meta[STATE_KEY] = f"{call.node.name}/l{layer}d{direction}/s{i}"
            steps = [None] * seq_len
            for t in (range(seq_len) if direction == 0 else reversed(range(seq_len))):
                x_t = tuple(emit(aten.select.int, p, td, t) for p in x_proj) \
                    if groups is not None else emit(aten.select.int, x_proj, td, t)
                h_proj = emit(aten.linear.default, state[0], w_hh, b_hh)
                state = cell(emit, x_t, h_proj, state, hidden)
                for i, s in enumerate(state):
                    s.meta[STATE_KEY] = f"{call.node.name}/l{layer}d{direction}/s{i}"
                steps[t] = emit(aten.unsqueeze.default, state[0], td)
            outputs.append(concat(emit, steps, td))
            for acc, s in zip(finals, state):
                acc.append(emit(aten.unsqueeze.default, s, 0))
        x = concat(emit, outputs, 2)
        if call.applies_dropout and layer < call.num_layers - 1:
            x = emit(aten.dropout.default, x, call.dropout, True)
    outs = [concat(emit, acc, 0) for acc in finals]
    for out, h in zip(outs, call.hx):
        out.meta[STATE_OF] = h.name
    return [x] + outs


def concat(emit: Emitter, nodes: Sequence[Node], dim: int) -> Node:
    """``aten.cat`` of ``nodes``, or the node itself when there is only one."""
    return nodes[0] if len(nodes) == 1 else emit(aten.cat.default, list(nodes), dim)


def gate(emit: Emitter, proj: Node, index: int, hidden: int) -> Node:
    """Columns of gate ``index`` (of width ``hidden``) from a ``[B, G*hidden]`` projection."""
    return gates(emit, proj, index, 1, hidden)


def gates(emit: Emitter, proj: Node, first: int, count: int, hidden: int) -> Node:
    """``count`` adjacent gates starting at gate ``first`` of a ``[B, G*hidden]`` projection."""
    return emit(aten.slice.Tensor, proj, 1, first * hidden, (first + count) * hidden)


def run_decomposition(gm: GraphModule, targets: Sequence, cell_for: Callable[[Node], Cell]) -> bool:
    """Decompose every call to one of ``targets`` in ``gm``; True when something changed."""
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in targets]
    for node in nodes:
        call = RecurrentCall.from_node(node)
        replace_outputs(gm, node, decompose_recurrent(gm, call, cell_for(node)))
    if nodes:
        finish(gm)
    return bool(nodes)
