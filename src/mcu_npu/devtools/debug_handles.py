"""The debug-handle map of a delegate: which Edge nodes each NPU operator of its payload came
from, so ExecuTorch's Inspector expands a delegate call into one row per operator.

Built in the backend's ``preprocess`` with ExecuTorch's ``DelegateMappingBuilder``: each
operator of the partition's TFLite graph (``npu_ops``; the graph Vela, the Neutron converter
or the reference compiler compiled, and the host emulator runs) maps to the debug handles of
the Edge nodes the converter made it from. An Edge compute node the converter folded into
another operator (an activation fused into a convolution, a view) maps with the operator
that computes its input, else with the one that reads its value, so every compute node of
the partition is covered.

The map lives in the lowered module's metadata and the ETRecord, not in the device program.
"""

from __future__ import annotations

from executorch.exir.backend.utils import DelegateMappingBuilder
from torch.export import ExportedProgram
from torch.fx import Node

from .npu_ops import npu_ops


def delegate_debug_map(partition: ExportedProgram, tflite: bytes,
                       op_origins: tuple[str, ...] = (),
                       compute: tuple[str, ...] = ()) -> dict[str, tuple[int, ...]]:
    """Identifier of each NPU operator of ``tflite`` -> debug handles of the Edge nodes of
    ``partition`` it computes. ``op_origins``: the converter's node name per operator (used
    when it describes this graph, else each operator's output tensor names, which are node
    names); ``compute``: names of the partition's compute nodes, each of which the map
    covers."""
    by_name = {n.name: n for n in partition.graph.nodes if n.op == "call_function"}
    ops = npu_ops(tflite)
    groups: dict[int, set[Node]] = {}
    owner: dict[Node, int] = {}
    for op in ops:
        names = (op_origins[op.index],) if len(op_origins) == len(ops) else op.outputs
        for name in names:
            node = by_name.get(name)
            if node is not None:
                groups.setdefault(op.index, set()).add(node)
                owner.setdefault(node, op.index)
    for name in compute:
        node = by_name.get(name)
        if node is None or node in owner:
            continue
        k = _nearest_owner(node, owner)
        if k is not None:
            groups[k].add(node)
            owner[node] = k
    builder = DelegateMappingBuilder(generated_identifiers=False)
    for op in ops:
        nodes = sorted(groups.get(op.index, ()), key=lambda n: n.name)
        if any(n.meta.get("debug_handle") is not None for n in nodes):
            builder.insert_delegate_mapping_entry(nodes=nodes, identifier=op.identifier)
    return builder.get_delegate_mapping()


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
