"""The debug-handle map of a delegate: which Edge nodes each NPU operator of its payload came
from, so ExecuTorch's Inspector expands a delegate call into one row per operator.

Built in the backend's ``preprocess`` with ExecuTorch's ``DelegateMappingBuilder``: each
operator of the partition's TFLite graph (``npu_ops``; the graph Vela, the Neutron converter
or the reference compiler compiled, and the host emulator runs) maps to the debug handles of
the Edge nodes the converter made it from. An Edge compute node the converter folded into
another operator (an activation fused into a convolution, a view) maps with the operator
that computes its input, else with the one that reads its value, so every compute node of
the partition is covered. An operator the converter adds around another (the reshape and
pad before a convolution) gets no entry of its own: ``Inspector`` still lists it with its
time, and the node's value is the main operator's output, which ``calculate_numeric_gap``
compares.

The map lives in the lowered module's metadata and the ETRecord, not in the device program.
"""

from __future__ import annotations

from executorch.exir.backend.utils import DelegateMappingBuilder
from torch.export import ExportedProgram
from torch.fx import Node

from ..device.npu_ops import computes_edge_value, npu_ops


def delegate_debug_map(partition: ExportedProgram, tflite: bytes,
                       op_origins: tuple[str, ...] = (),
                       compute: tuple[str, ...] = ()) -> dict[str, tuple[int, ...]]:
    """Identifier of each NPU operator of ``tflite`` -> debug handles of the Edge nodes of
    ``partition`` it computes: the node the converter made it from (``op_origins``, when
    it describes this graph) and the node its output tensor is named after (an activation
    fused into it). ``compute``: names of the partition's compute nodes, each of which the
    map covers."""
    groups = npu_op_nodes(partition, tflite, op_origins, compute)
    builder = DelegateMappingBuilder(generated_identifiers=False)
    for op in npu_ops(tflite):
        nodes = groups.get(op.index, [])
        if any(n.meta.get("debug_handle") is not None for n in nodes):
            builder.insert_delegate_mapping_entry(nodes=nodes, identifier=op.identifier)
    return builder.get_delegate_mapping()


def npu_op_nodes(partition: ExportedProgram, tflite: bytes, op_origins: tuple[str, ...] = (),
                 compute: tuple[str, ...] = ()) -> dict[int, list[Node]]:
    """Index of each NPU operator of ``tflite`` -> the Edge nodes of ``partition`` it
    computes (sorted by name), as ``delegate_debug_map`` maps them; an operator the
    converter added around another has none."""
    by_name = {n.name: n for n in partition.graph.nodes if n.op == "call_function"}
    ops = npu_ops(tflite)
    groups: dict[int, set[Node]] = {}
    owner: dict[Node, int] = {}
    origins = op_origins if len(op_origins) == len(ops) else ("",) * len(ops)

    def take(op, names) -> None:
        for node in filter(None, map(by_name.get, names)):
            groups.setdefault(op.index, set()).add(node)
            owner[node] = op.index  # the last operator made from a node computes it

    for op in ops:
        if computes_edge_value(op):
            take(op, (origins[op.index], *op.outputs))
    for op in ops:  # an operator the converter added keeps an entry if its node has none
        if not computes_edge_value(op) and by_name.get(origins[op.index]) not in owner:
            take(op, (origins[op.index],))
    for name in compute:
        node = by_name.get(name)
        if node is None or node in owner:
            continue
        k = _nearest_owner(node, owner)
        if k is not None:
            groups[k].add(node)
            owner[node] = k
    return {k: sorted(nodes, key=lambda n: n.name) for k, nodes in groups.items()}


def _nearest_owner(node: Node, owner: dict[Node, int]) -> int | None:
    """The operator of the nearest node ``node`` reads (breadth first through its inputs:
    the operator that fused it), else of the nearest node reading its value."""
    for step in (lambda n: list(n.all_input_nodes), lambda n: list(n.users)):
        seen, frontier = {node}, step(node)
        while frontier:
            for n in frontier:
                if n in owner:
                    return owner[n]
            seen.update(frontier)
            frontier = [m for n in frontier for m in step(n) if m not in seen]
    return None
