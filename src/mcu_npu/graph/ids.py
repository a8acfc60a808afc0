"""ATen node identity: the name a node had in the graph that was quantized, carried to every
node it becomes.

torch.export and ``to_edge`` carry ``node.meta["custom"]`` to every node an op becomes, so an
Edge node (and what the Cortex-M lowering makes of it) can be traced back to the ATen node
its placement was decided for. The quantizer tags nodes (``tag_nodes``); the partitioner,
the placement and the report read the tag (``node_id``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.fx import GraphModule, Node

NODE_ID = "mcu_npu_id"
"""Key in ``node.meta["custom"]``: a node's name in the graph that was quantized."""


def tag_nodes(model: GraphModule) -> GraphModule:
    """Record each op node's name under ``NODE_ID`` (kept when already set)."""
    for node in model.graph.nodes:
        if node.op == "call_function":
            node.meta.setdefault("custom", {}).setdefault(NODE_ID, node.name)
    return model


def node_id(node: Node) -> str | None:
    """The ATen node ``node`` was made from (its ``NODE_ID``), None when it carries none."""
    return node.meta.get("custom", {}).get(NODE_ID)
