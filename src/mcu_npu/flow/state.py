"""State: a model that keeps state between calls (buffers it updates in place) compiled as
a function of its inputs and its state, and its program given the state back as mutable
buffers (``program_state``).

The calibration samples of such a model are a stream: consecutive calls, in order. Each
call's state is the one the float model leaves after the calls before it, from the
buffers' initial values, so the state inputs are calibrated on the values they take when
the program runs the stream."""

from __future__ import annotations

from dataclasses import replace

from torch.fx import GraphModule, Node

from ..errors import stage
from ..passes.aten._recurrent import STATE_OF
from ..passes.aten.lift_state import LiftState
from ..passes.edge.order import STATE
from ..program_state import ProgramState, leaves
from .inputs import Arguments

STATE_HINT = "keep the model's state in registered buffers written with copy_, or report it"


def lift_state(graph: GraphModule) -> tuple[GraphModule, ProgramState]:
    """The stage: ``graph`` with each buffer it writes in place lifted into an input and an
    output (``passes.aten.LiftState``), and the state found (empty: none)."""
    with stage("lifting the model's state", STATE_HINT):
        lift = LiftState()
        lift(graph)
    return graph, lift.state


def streamed(args: Arguments, graph: GraphModule, state: ProgramState) -> Arguments:
    """``args`` with the state each call reads appended to the example inputs (the initial
    value) and to every sample (the value the float ``graph`` carries along the stream of
    samples, in order)."""
    if not state:
        return args
    with stage("running the calibration stream", STATE_HINT):
        samples = state.stream(graph, args.samples)
        accuracy = state.stream(graph, args.accuracy_samples) \
            if args.accuracy_samples is not None else None
    return replace(args, example_inputs=(*args.example_inputs, *state.initial),
                   samples=samples, accuracy_samples=accuracy,
                   program_io=replace(args.program_io, state=state))


def state_pairs(state: ProgramState, graph: GraphModule | None = None) \
        -> list[tuple[int, int]]:
    """(input index, output index) of each state tensor in the lifted graph, and of each
    state the model takes as an input and returns (``io_state_pairs``)."""
    lifted = [(state.user_inputs + k, state.user_outputs + k)
              for k in range(len(state.tensors))]
    explicit = io_state_pairs(graph) if graph is not None else []
    return lifted + [p for p in explicit if p not in lifted]


def io_state_pairs(graph: GraphModule) -> list[tuple[int, int]]:
    """(input index, output index) of each recurrent state a model takes as an input and
    returns as an output (``forward(x, h) -> (y, h_new)`` of a GRU, LSTM or RNN cell or
    layer): the rewrites mark a recurrent step's final state with the initial state it
    continues (``STATE_OF``). Such a pair is quantized with one encoding, so the firmware
    passes the int8 state it got back in as it is."""
    inputs = [n for n in graph.graph.nodes if n.op == "placeholder"]
    placeholders = {n.name: i for i, n in enumerate(inputs)}
    pairs = []
    for j, out in enumerate(leaves(graph.graph.output_node().args[0])):
        source = out.meta.get(STATE_OF) if isinstance(out, Node) else None
        if source in placeholders and _shape(inputs[placeholders[source]]) == _shape(out):
            pairs.append((placeholders[source], j))
    return pairs


def _shape(node: Node):
    val = node.meta.get("val")
    return tuple(val.shape) if val is not None else None



def state_as_buffers(edge, state: ProgramState | None) -> ProgramState | None:
    """The lowered ``edge`` with its state pairs made mutable buffers (in place,
    ``passes.edge.order.STATE``); the state with each buffer's type and encoding."""
    if not state:
        return state
    (as_buffers,) = STATE.passes
    with stage("keeping the state in the program's buffers", STATE_HINT):
        make = as_buffers(state)
        make(edge.exported_program())
    return make.state
