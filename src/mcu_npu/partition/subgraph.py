"""A proposed partition as a stand-alone program, for trial conversion while partitioning.

It offers what the TFLite converter reads of an ExportedProgram (graph, signature, weights)
without copying or modifying the owning program.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx import Graph, Node


@dataclass
class _Signature:
    input_specs: list
    inputs_to_parameters: dict = field(default_factory=dict)
    inputs_to_buffers: dict = field(default_factory=dict)
    inputs_to_lifted_tensor_constants: dict = field(default_factory=dict)


@dataclass
class _GraphOnly:
    """What the converter reads of a GraphModule: its graph. A GraphModule would generate
    the graph's Python code, which a trial conversion never runs."""

    graph: Graph


@dataclass
class PartitionView:
    graph_module: _GraphOnly
    graph_signature: _Signature
    state_dict: dict
    constants: dict


def partition_view(program: ExportedProgram, nodes: list[Node]) -> PartitionView:
    """``nodes`` (in graph order) as a program: outside values become inputs, values used
    outside become outputs, parameters stay parameters."""
    sig = program.graph_signature
    owned = set(nodes)
    graph = Graph()
    env: dict[Node, Node] = {}
    view_sig = _Signature(input_specs=[])
    tables = (("inputs_to_parameters", sig.inputs_to_parameters),
              ("inputs_to_buffers", sig.inputs_to_buffers),
              ("inputs_to_lifted_tensor_constants", sig.inputs_to_lifted_tensor_constants))

    def outside(n: Node) -> Node:
        if n not in env:
            p = graph.placeholder(n.name)
            p.meta = dict(n.meta)
            env[n] = p
            for attr, table in tables:
                if n.name in table:
                    getattr(view_sig, attr)[p.name] = table[n.name]
                    break
            else:
                view_sig.input_specs.append(
                    SimpleNamespace(kind=InputKind.USER_INPUT, arg=SimpleNamespace(name=p.name)))
        return env[n]

    for node in nodes:
        for inp in node.all_input_nodes:
            if inp not in owned:
                outside(inp)
        env[node] = graph.node_copy(node, lambda n: env[n])
    results = [env[n] for n in nodes if any(u not in owned for u in n.users)]
    graph.output(tuple(results))
    return PartitionView(_GraphOnly(graph), view_sig, program.state_dict,
                         program.constants)


def nearest_upstream(starts, stop, within=None) -> list[Node]:
    """The nodes of ``stop`` reached first walking back from ``starts`` (each start itself
    included), looking through every other node; only through nodes of ``within`` when
    given."""
    found, seen, todo = [], set(), list(starts)
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if node in stop:
            found.append(node)
        else:
            todo.extend(a for a in node.all_input_nodes if within is None or a in within)
    return found
