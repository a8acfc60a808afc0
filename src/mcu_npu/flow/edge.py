"""Edge: the quantized reference lowered to ExecuTorch's Edge dialect, the ops the converter
takes whole preserved (``edge_compile_config``), done in place where that gives what
``to_edge`` would (``upstream.edge_dialect``, ``upstream.decompose_in_place``)."""

from __future__ import annotations

import torch
from executorch.exir import EdgeCompileConfig, EdgeProgramManager
from executorch.exir.tracer import _default_decomposition_table
from torch.fx import GraphModule

from ..errors import UnsupportedModelError
from ..tflite.registry import PRESERVED_ATEN_OPS
from ..upstream.decompose_in_place import decompose_in_place
from ..upstream.edge_dialect import to_edge_in_place
from ..upstream.patches import edge_program_from_core_aten

TO_EDGE = "converting the quantized model to the Edge dialect"
"""The stage that runs ``to_edge_program`` (``errors.stage``)."""


def edge_compile_config() -> EdgeCompileConfig:
    """Quantized graphs carry ops outside the core ATen set; the converter checks them."""
    return EdgeCompileConfig(_check_ir_validity=False, preserve_ops=list(PRESERVED_ATEN_OPS))


def default_aten_passes(target) -> list:
    """ATen rewrites a target applies before quantization, in order: autocast regions that
    change nothing on a CPU in float32 become the ops they hold; convolutions and pooling
    on unbatched inputs get a batch of one; a SiLU becomes sigmoid and multiply, quantized
    where the device rounds them; a linear layer with a run-time weight becomes a
    matmul; recurrent layers become single-layer, then elementary ops every NPU converts;
    steps whose output is never read are not computed, a zero initial state costs no
    recurrent matmul, and per-step outputs are gathered without a copy each; what is computed
    from constants alone is computed once, into a constant (a class token's expand, a bias
    table's index, a standardised weight), so convolutions get plain weights, and a division
    by a constant is a multiplication by its reciprocal; unbinds become
    selects; attention, batched matmuls and layer, group and instance normalization become
    the bmm, softmax, mean and elementwise ops NPUs run, each quantized on its own, and a
    reshape that needs a copy makes it explicit, so the copy is quantized too; a BatchNorm
    that no convolution or linear layer absorbs becomes a depthwise convolution, and a
    resize of a small map that the NPU cannot resize a linear layer over its positions."""
    from ..passes import DecomposeGRU, DecomposeLSTM, DecomposeRNN, SplitGRUByLayers
    from ..passes.aten import (AddBatchDimension, ConvertBatchNormToDepthwise, ConvertDivToMul,
                              ConvertResizeToLinear,
                              DecomposeGroupNorm, DecomposeLayerNorm, DecomposeMatmul,
                              DecomposeReshape,
                              DecomposeScaledDotProductAttention, DecomposeSiLU,
                              DecomposeUnbind, FoldConstants,
                              FoldLinearOfZeros, FoldSelectOfCat, InlineDisabledAutocast,
                              LinearOfActivations, StackByConcat)

    return [InlineDisabledAutocast(), AddBatchDimension(), LinearOfActivations(),
            DecomposeSiLU(),
            SplitGRUByLayers(), DecomposeGRU(), DecomposeRNN(), DecomposeLSTM(),
            FoldSelectOfCat(), FoldLinearOfZeros(), FoldConstants(), ConvertDivToMul(),
            StackByConcat(),
            DecomposeUnbind(), DecomposeScaledDotProductAttention(), DecomposeMatmul(),
            DecomposeLayerNorm(), DecomposeGroupNorm(), DecomposeReshape(),
            ConvertBatchNormToDepthwise(), ConvertResizeToLinear(target)]


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
    place when that gives what ``to_edge`` would (``upstream.edge_dialect``), else by ``to_edge``'s
    passes without its second decomposition (``upstream.patches``)."""
    config = edge_compile_config()
    ep = core_aten_program(reference, example_inputs, config)
    edge = to_edge_in_place(ep, config)
    if edge is None:  # to_edge's passes, without its decomposition (done already)
        edge = edge_program_from_core_aten(ep, config)
    return edge


def core_aten_program(reference: GraphModule, example_inputs: tuple,
                      config: EdgeCompileConfig) -> torch.export.ExportedProgram:
    """``reference`` exported and decomposed as ``to_edge`` would, but re-traced only if an
    op needs more than a one-node rewrite (``upstream.decompose_in_place``). Unrolled
    recurrent graphs hold thousands of nodes, so node
    provenance (``from_node``, which every re-trace deep-copies and extends) is dropped."""
    _drop_provenance(reference.graph)
    ep = torch.export.export(reference, tuple(example_inputs))
    _drop_provenance(ep.graph)
    decompose_in_place(ep, config.preserve_ops)
    table = _default_decomposition_table()
    for op in config.preserve_ops:
        table.pop(op, None)
    if not _decomposed_already(ep, table, config):
        ep = ep.run_decompositions(table)
    return ep


def _drop_provenance(graph: torch.fx.Graph) -> None:
    for node in graph.nodes:
        node.meta.pop("from_node", None)


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
