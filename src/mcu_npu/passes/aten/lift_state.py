"""LiftState: a buffer the model updates in place becomes an input and an output.

``torch.export`` captures ``self.h.copy_(h_new)`` (or any in-place update of a registered
buffer) as a buffer mutation; the module it unlifts reads the buffer with ``get_attr`` and
writes it back with ``copy_``. Quantization, partitioning and the NPU converters work on
functions of their inputs, so the buffer is lifted: its reads read a new input placed after
the model's own, and the value written is returned after the model's own outputs. Every read
of the buffer in the unlifted graph is of the value it had when the call began (later reads
already use the written value), so the rewrite is exact.

Before::

    ring = get_attr("ring")
    window = cat([ring, x], 2)
    copy_(ring, slice(window, 2, 1))
    return (head(window),)

After::

    x = placeholder; state_ring = placeholder
    window = cat([state_ring, x], 2)
    return (head(window), slice(window, 2, 1))

Accepted: ``copy_`` into a buffer (what the unlifted module writes for every mutation:
``copy_``, ``add_``, ``mul_``, ``index_put_`` in the model alike). A buffer written twice
keeps the last value written. The lifted buffers, their initial values and the graph's
input and output counts are recorded in ``self.state`` (``program_state.ProgramState``).
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.upstream.private import pytree, set_pytree_calling
from mcu_npu.program_state import ProgramState, StateTensor, leaves

aten = torch.ops.aten


class LiftState(PassBase):
    """Lift every buffer written in place into an input and an output of the graph."""

    def __init__(self):
        super().__init__()
        self.state = ProgramState()

    def call(self, graph_module: GraphModule) -> PassResult:
        graph = graph_module.graph
        buffers = dict(graph_module.named_buffers())
        writes: dict[str, Node] = {}  # buffer name -> the copy_ writing it last
        for node in graph.nodes:
            if node.op == "call_function" and node.target is aten.copy_.default \
                    and isinstance(node.args[0], Node) and node.args[0].op == "get_attr" \
                    and node.args[0].target in buffers:
                writes[node.args[0].target] = node
        output = graph.output_node()
        user_outputs = list(leaves(output.args[0]))
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        self.state = ProgramState((), len(placeholders), len(user_outputs))
        if not writes:
            return PassResult(graph_module, False)
        tensors, values = [], []
        last = placeholders[-1] if placeholders else None
        for name, write in writes.items():
            initial = buffers[name].detach().clone()
            if last is None:
                with graph.inserting_before(next(iter(graph.nodes))):
                    lifted = graph.placeholder("state_" + name.replace(".", "_"))
            else:
                with graph.inserting_after(last):
                    lifted = graph.placeholder("state_" + name.replace(".", "_"))
            lifted.meta["val"] = write.args[0].meta.get("val")
            last = lifted
            value = write.args[1]
            for node in list(graph.nodes):  # every get_attr of the buffer reads the input
                if node.op == "get_attr" and node.target == name:
                    for user in list(node.users):
                        if user.target is aten.copy_.default and user.args[0] is node:
                            graph.erase_node(user)
                    node.replace_all_uses_with(lifted)
                    graph.erase_node(node)
            tensors.append(StateTensor(name, initial))
            values.append(value)
        output.args = (tuple(user_outputs) + tuple(values),)
        _flat_signature(graph_module, len(placeholders) + len(tensors),
                        len(user_outputs) + len(values))
        for name in writes:
            _drop_buffer(graph_module, name)
        graph.lint()
        graph_module.recompile()
        self.state = ProgramState(tuple(tensors), len(placeholders), len(user_outputs))
        return PassResult(graph_module, True)


def _flat_signature(gm: GraphModule, inputs: int, outputs: int) -> None:
    """``gm`` taking ``inputs`` positional tensors and returning a tuple of ``outputs``, as
    its pytree code and torch.export's input check (``_in_spec``) say."""
    set_pytree_calling(gm, pytree.tree_flatten((tuple(range(inputs)), {}))[1],
                       pytree.tree_flatten(tuple(range(outputs)))[1])


def _drop_buffer(module: torch.nn.Module, name: str) -> None:
    *path, leaf = name.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    owner._buffers.pop(leaf, None)
