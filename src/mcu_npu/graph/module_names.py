"""The model's own layer names (``features.3.conv.0``) carried from the exported graph to the
Edge program.

``torch.export`` records on each node the module call it came from (``nn_module_stack``) and
the torch function (``torch_fn``). Quantizing re-exports a graph module, which loses both, so
the Edge program's nodes would read ``aten::convolution`` in ExecuTorch's viewers and the
report could not name layers. ``module_meta`` keeps them per node before quantization and
``restore_module_meta`` puts them back on every Edge node made from that node (by node id,
``graph.ids``).
"""

from __future__ import annotations

from torch.fx import GraphModule, Node

from .ids import node_id

KEYS = ("nn_module_stack", "torch_fn")
"""The node metadata carried: what ExecuTorch's ETRecord and Model Explorer show."""


def module_meta(gm: GraphModule) -> dict[str, dict]:
    """Node id (or, untagged, node name) -> the ``KEYS`` metadata of each op node of ``gm``
    that has any."""
    table = {}
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        meta = {k: n.meta[k] for k in KEYS if n.meta.get(k)}
        if meta:
            table[node_id(n) or n.name] = meta
    return table


def restore_module_meta(gm: GraphModule, table: dict[str, dict]) -> None:
    """Give each op node of ``gm`` made from a node of ``table`` its ``KEYS`` metadata where
    it has none (in place)."""
    if not table:
        return
    for n in gm.graph.nodes:
        meta = table.get(node_id(n)) if n.op == "call_function" else None
        for key, value in (meta or {}).items():
            if not n.meta.get(key):
                n.meta[key] = value


def layer_name(node: Node | None) -> str:
    """The model's name of the module ``node`` was called in (``features.3.conv.0``), ""
    for a node of the model's own ``forward``."""
    stack = (node.meta.get("nn_module_stack") if node is not None else None) or {}
    if not stack:
        return ""
    path = list(stack.values())[-1]
    path = path[0] if isinstance(path, (tuple, list)) else path
    return _clean(str(path))


def _clean(path: str) -> str:
    """``L['self'].features[3].conv[0]`` / ``L__self___features_3`` forms -> dotted names."""
    if path.startswith("L['self']"):
        path = path[len("L['self']"):].lstrip(".")
        path = path.replace("['", ".").replace("']", "").replace("[", ".").replace("]", "")
    return path.lstrip(".")
