"""The compile flow's steps around quantization, shared by the API, the recipes, the
quantizers, tests and benchmarks: export, then (after ``mcu_npu.quantization``) Edge. Each
step is a plain function over ExecuTorch objects."""

from __future__ import annotations

import torch
from executorch.exir import EdgeCompileConfig, EdgeProgramManager
from executorch.exir.tracer import _default_decomposition_table
from torch.fx import GraphModule

from .edge_dialect import to_edge_in_place
from .errors import UnsupportedModelError
from .tflite.registry import PRESERVED_ATEN_OPS
from .upstream_patches import edge_program_from_core_aten


def edge_compile_config() -> EdgeCompileConfig:
    """Quantized graphs carry ops outside the core ATen set; the converter checks them."""
    return EdgeCompileConfig(_check_ir_validity=False, preserve_ops=list(PRESERVED_ATEN_OPS))


def default_aten_passes(target) -> list:
    """ATen rewrites a target applies before quantization, in order: recurrent layers become
    single-layer, then elementary ops every NPU converts; steps whose output is never read
    are not computed, a zero initial state costs no recurrent matmul, and per-step outputs
    are gathered without a copy each."""
    from .passes import DecomposeGRU, DecomposeLSTM, DecomposeRNN, SplitGRUByLayers
    from .passes.aten import FoldLinearOfZeros, FoldSelectOfCat, StackByConcat

    return [SplitGRUByLayers(), DecomposeGRU(), DecomposeRNN(), DecomposeLSTM(),
            FoldSelectOfCat(), FoldLinearOfZeros(), StackByConcat()]


def export_module(model: torch.nn.Module, example_inputs: tuple) -> GraphModule:
    """torch.export a module into a plain ATen GraphModule, with export's message on failure."""
    example_inputs = tuple(x.contiguous() if isinstance(x, torch.Tensor) else x
                           for x in example_inputs)  # odd strides would read as channels-last
    try:
        ep = torch.export.export(model.eval(), example_inputs)
    except Exception as exc:  # torch raises many types; the message is what matters
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsupportedModelError(f"torch.export could not capture the model: {first}") from exc
    return ep.module(check_guards=False)


def to_edge_program(reference: GraphModule, example_inputs: tuple) -> EdgeProgramManager:
    """Quantized reference -> Edge program, with the converter's ops preserved: converted in
    place when that gives what ``to_edge`` would (``edge_dialect``), else by ``to_edge``'s
    passes without its second decomposition (``upstream_patches``)."""
    config = edge_compile_config()
    ep = core_aten_program(reference, example_inputs, config)
    edge = to_edge_in_place(ep, config)
    if edge is None:  # to_edge's passes, without its decomposition (done already)
        edge = edge_program_from_core_aten(ep, config)
    return edge


def core_aten_program(reference: GraphModule, example_inputs: tuple,
                      config: EdgeCompileConfig) -> torch.export.ExportedProgram:
    """``reference`` exported and decomposed as ``to_edge`` would, but re-traced only if an
    op needs decomposing. Unrolled recurrent graphs hold thousands of nodes, so node
    provenance (``from_node``, which every re-trace deep-copies and extends) is dropped."""
    _drop_provenance(reference.graph)
    ep = torch.export.export(reference, tuple(example_inputs))
    _drop_provenance(ep.graph)
    _zeros_as_full(ep)
    table = _default_decomposition_table()
    for op in config.preserve_ops:
        table.pop(op, None)
    if not _decomposed_already(ep, table, config):
        ep = ep.run_decompositions(table)
    return ep


def _drop_provenance(graph: torch.fx.Graph) -> None:
    for node in graph.nodes:
        node.meta.pop("from_node", None)


def _zeros_as_full(ep) -> None:
    """Rewrite ``aten.zeros`` (the initial state of a recurrent layer) to the ``full`` it
    decomposes to, so it does not force the decomposition re-trace."""
    aten = torch.ops.aten
    zeros = [n for n in ep.graph.nodes if n.op == "call_function" and n.target == aten.zeros.default]
    for node in zeros:
        node.target, node.args = aten.full.default, (node.args[0], 0.0)
    if zeros:
        ep.graph_module.recompile()


def _decomposed_already(ep, table: dict, config: EdgeCompileConfig) -> bool:
    """Every op of ``ep`` is one decomposing with ``table`` (``to_edge``'s) keeps as it is."""
    keep = set(config.preserve_ops)
    for node in ep.graph.nodes:
        op = node.target
        if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload) or op in keep:
            continue
        if op in table or (op.namespace == "aten" and torch.Tag.core not in op.tags):
            return False
    return True
