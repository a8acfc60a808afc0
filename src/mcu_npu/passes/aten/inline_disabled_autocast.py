"""InlineDisabledAutocast: an autocast region that changes nothing becomes plain ops.

Before::

    out = wrap_with_autocast("cpu", torch.bfloat16, False, False, submod, q, k, v)[0]
    # submod: out = q @ (k.transpose(-1, -2) @ v)

After::

    out = q @ (k.transpose(-1, -2) @ v)

torch.export turns ``with torch.autocast(..., enabled=False):`` (EfficientViT's attention)
into a higher-order op around a submodule. On a CPU in float32 with no autocast around it,
a disabled region, or one for another device, computes what its ops compute without it, so
its ops replace it. Then the passes after this one, the quantizers, the converter and the
float64 reference see those ops; the region hides them from all of them. A region that
enables autocast on the CPU (lower precision) is left as it is, and so is what it holds.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import finish, is_call

WRAP_WITH_AUTOCAST = torch.ops.higher_order.wrap_with_autocast


def _changes_nothing(node: Node) -> bool:
    """A region whose autocast is disabled or for another device than the CPU, read only
    through its outputs' tuple access."""
    if not is_call(node, WRAP_WITH_AUTOCAST):
        return False
    device, _dtype, enabled = node.args[:3]
    return (not enabled or device != "cpu") and \
        all(u.target is operator.getitem for u in node.users)


def _attribute(gm: GraphModule, owner: torch.nn.Module, target: str, prefix: str) -> str:
    """Attribute ``target`` of ``owner`` (a submodule, a parameter or a constant) made an
    attribute of ``gm``; its name there."""
    value = owner
    for part in target.split("."):
        value = getattr(value, part)
    name, i = f"{prefix}_{target.replace('.', '_')}", 0
    while hasattr(gm, name):
        i += 1
        name = f"{prefix}_{target.replace('.', '_')}_{i}"
    if isinstance(value, torch.nn.Module):
        gm.add_submodule(name, value)
    elif isinstance(value, torch.nn.Parameter):
        gm.register_parameter(name, value)
    elif isinstance(value, torch.Tensor):
        gm.register_buffer(name, value)
    else:
        setattr(gm, name, value)
    return name


def _inline(gm: GraphModule, node: Node) -> list[Node]:
    """Region ``node``'s ops copied in its place; returns the copies."""
    region = node.args[4]
    sub = getattr(gm, region.target)
    env: dict[Node, object] = {}
    inputs = [n for n in sub.graph.nodes if n.op == "placeholder"]
    env.update(zip(inputs, node.args[5:]))
    copies, outputs = [], ()
    with gm.graph.inserting_before(node):
        for n in sub.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                outputs = torch.fx.node.map_arg(n.args[0], env.__getitem__)
                continue
            if n.op == "get_attr":
                copy = gm.graph.get_attr(_attribute(gm, sub, n.target, region.target))
                copy.meta = dict(n.meta)
            else:
                copy = gm.graph.node_copy(n, env.__getitem__)
            env[n] = copy
            copies.append(copy)
    outputs = outputs if isinstance(outputs, (list, tuple)) else (outputs,)
    for item in list(node.users):
        item.replace_all_uses_with(outputs[item.args[1]])
        gm.graph.erase_node(item)
    gm.graph.erase_node(node)
    if not region.users:
        gm.graph.erase_node(region)
        if not any(n.op == "get_attr" and n.target == region.target for n in gm.graph.nodes):
            gm.delete_submodule(region.target)
    return copies


class InlineDisabledAutocast(PassBase):
    """Replace every autocast region that changes nothing by the ops it holds (nested
    regions of such a region too)."""

    def call(self, graph_module: GraphModule) -> PassResult:
        work = [n for n in graph_module.graph.nodes if _changes_nothing(n)]
        modified = bool(work)
        while work:
            work.extend(n for n in _inline(graph_module, work.pop(0)) if _changes_nothing(n))
        if modified:
            finish(graph_module)
        return PassResult(graph_module, modified)
