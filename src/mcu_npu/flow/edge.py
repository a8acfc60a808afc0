"""Edge: the quantized reference lowered to ExecuTorch's Edge dialect, the ops the converter
takes whole preserved (``edge_compile_config``), done in place where that gives what
``to_edge`` would (``flow.edge_dialect``, ``flow.decompose_in_place``)."""

from __future__ import annotations

import functools

import torch
from executorch.exir import EdgeCompileConfig, EdgeProgramManager
from torch.fx import GraphModule

from ..upstream.private import default_decomposition_table
from ..tflite.registry import PRESERVED_ATEN_OPS
from .decompose_in_place import decompose_in_place
from .edge_dialect import to_edge_in_place
from .export_in_place import export_in_place
from ..upstream.patches import cia_ops_collected_once, edge_program_from_core_aten

TO_EDGE = "converting the quantized model to the Edge dialect"
"""The stage that runs ``to_edge_program`` (``errors.stage``)."""


def edge_compile_config() -> EdgeCompileConfig:
    """Quantized graphs carry ops outside the core ATen set; the converter checks them."""
    return EdgeCompileConfig(_check_ir_validity=False, preserve_ops=list(PRESERVED_ATEN_OPS))


def to_edge_program(reference: GraphModule, example_inputs: tuple) -> EdgeProgramManager:
    """Quantized reference -> Edge program, with the converter's ops preserved: converted in
    place when that gives what ``to_edge`` would (``flow.edge_dialect``), else by ``to_edge``'s
    passes without its second decomposition (``upstream.patches``)."""
    config = edge_compile_config()
    ep = core_aten_program(reference, example_inputs, config)
    edge = to_edge_in_place(ep, config)
    if edge is None:  # to_edge's passes, without its decomposition (done already)
        edge = edge_program_from_core_aten(ep, config)
    return edge


def core_aten_program(reference: GraphModule, example_inputs: tuple,
                      config: EdgeCompileConfig) -> torch.export.ExportedProgram:
    """``reference`` exported (in place where that gives what export would:
    ``flow.export_in_place``) and decomposed as ``to_edge`` would, but re-traced only if an
    op needs more than a one-node rewrite (``flow.decompose_in_place``). Unrolled
    recurrent graphs hold thousands of nodes, so node
    provenance (``from_node``, which every re-trace deep-copies and extends) is dropped."""
    _drop_provenance(reference.graph)
    ep = export_in_place(reference, tuple(example_inputs))
    if ep is None:
        ep = torch.export.export(reference, tuple(example_inputs))
        _drop_provenance(ep.graph)
    decompose_in_place(ep, config.preserve_ops)
    if not _decomposed_already(ep, config):
        with cia_ops_collected_once():
            ep = ep.run_decompositions(_decomposition_table(config.preserve_ops))
    _inputs_targeted_by_name(ep.graph_module)
    return ep


def _inputs_targeted_by_name(gm: GraphModule) -> None:
    """Give each input node its name as its target, as a re-trace does. Export may name the
    input of a module attribute spelled ``RNN`` ``p_rnn_...`` beside the target
    ``p_RNN_...``; ExecuTorch's ``remove_unused_parameters_pass`` looks up the signature's
    names among the targets, and refuses the program where they differ."""
    renamed = [n for n in gm.graph.nodes if n.op == "placeholder" and n.target != n.name]
    for node in renamed:
        node.target = node.name
    if renamed:
        gm.recompile()


def _decomposition_table(preserve_ops) -> dict:
    """``to_edge``'s decomposition table without ``preserve_ops``."""
    table = default_decomposition_table()
    for op in preserve_ops:
        table.pop(op, None)
    return table


@functools.lru_cache(maxsize=None)
def _decomposed_ops(preserve_ops: tuple) -> frozenset:
    """The ops ``_decomposition_table(preserve_ops)`` decomposes: asking the table itself
    enumerates every registered op's decomposition, about 45 ms on each compile."""
    return frozenset(_decomposition_table(preserve_ops))


def _drop_provenance(graph: torch.fx.Graph) -> None:
    for node in graph.nodes:
        node.meta.pop("from_node", None)


def _decomposed_already(ep, config: EdgeCompileConfig) -> bool:
    """Every op of ``ep`` is one decomposing as ``to_edge`` does keeps as it is."""
    keep = set(config.preserve_ops)
    table = _decomposed_ops(tuple(config.preserve_ops))
    for node in ep.graph.nodes:
        op = node.target
        if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload) or op in keep:
            continue
        if op in table or (op.namespace == "aten" and torch.Tag.core not in op.tags):
            return False
    return True
