"""Rewrite: the target's ATen passes turn the exported graph into the ops the target quantizes
and converts, and every node gets the id that follows it to the report (``graph.ids``)."""

from __future__ import annotations

from torch.fx import GraphModule

from ..errors import stage
from ..quantization.composed import TargetQuantizer


def rewrite(graph: GraphModule, target) -> GraphModule:
    """The stage: ``for_annotation``, its failures named as the stage's."""
    with stage("rewriting the model for quantization"):
        return for_annotation(graph, target)


def for_annotation(graph: GraphModule, target) -> GraphModule:
    """``graph`` as the target's quantizer annotates it: rewritten by ``default_aten_passes``,
    its nodes tagged."""
    return TargetQuantizer(target, aten_passes=default_aten_passes(target)) \
        .transform_for_annotation(graph)


def default_aten_passes(target) -> list:
    """ATen rewrites a target applies before quantization, in order: autocast regions that
    change nothing on a CPU in float32 become the ops they hold; convolutions padded by
    mode ("same") get explicit padding, and 1-D upsampling is the 2-D one of height 1;
    convolutions and pooling on unbatched inputs get a batch of one; a SiLU and a GLU become
    sigmoid and multiply, quantized where the device rounds them, and a log_softmax the log
    of a softmax; a linear layer with a run-time weight becomes a matmul; recurrent layers become
    single-layer, then elementary ops every NPU converts; steps whose output is never read
    are not computed, a zero initial state costs no
    recurrent matmul, and per-step outputs are gathered without a copy each; what is computed
    from constants alone is computed once, into a constant (a class token's expand, a bias
    table's index, a standardised weight), so convolutions get plain weights, and a division
    by a constant is a multiplication by its reciprocal; an index by constant indices and a
    reflect, replicate or circular pad become slices and a concatenation, and a repeat a
    concatenation of copies; unbinds become
    selects; attention, batched matmuls and layer, group and instance normalization become
    the bmm, softmax, mean and elementwise ops NPUs run, each quantized on its own, and a
    reshape that needs a copy makes it explicit, so the copy is quantized too; a BatchNorm
    that no convolution or linear layer absorbs becomes a depthwise convolution, and a
    resize of a small map that the NPU cannot resize a linear layer over its positions."""
    from ..passes import DecomposeGRU, DecomposeLSTM, DecomposeRNN, SplitGRUByLayers
    from ..passes.aten import (AddBatchDimension, ConvertBatchNormToDepthwise,
                              ConvertConstantIndexToSlices, ConvertDivToMul,
                              ConvertPadModeToSlices,
                              ConvertRepeatToCat, ConvertResizeToLinear, ConvertUpsample1dTo2d,
                              DecomposeGLU, DecomposeGroupNorm, DecomposeLayerNorm,
                              DecomposeLogSoftmax,
                              DecomposeMatmul,
                              DecomposeReshape,
                              DecomposeScaledDotProductAttention, DecomposeSiLU,
                              DecomposeUnbind, FoldConstants,
                              FoldLinearOfZeros, FoldSelectOfCat, InlineDisabledAutocast,
                              LinearOfActivations, MakeConvPaddingExplicit,
                              StackByConcat)

    return [InlineDisabledAutocast(), MakeConvPaddingExplicit(), ConvertUpsample1dTo2d(),
            AddBatchDimension(),
            LinearOfActivations(), DecomposeSiLU(), DecomposeGLU(), DecomposeLogSoftmax(),
            SplitGRUByLayers(), DecomposeGRU(), DecomposeRNN(), DecomposeLSTM(),
            FoldSelectOfCat(), FoldLinearOfZeros(), FoldConstants(), ConvertDivToMul(),
            ConvertConstantIndexToSlices(), ConvertPadModeToSlices(), ConvertRepeatToCat(),
            StackByConcat(),
            DecomposeUnbind(), DecomposeScaledDotProductAttention(), DecomposeMatmul(),
            DecomposeLayerNorm(), DecomposeGroupNorm(), DecomposeReshape(),
            ConvertBatchNormToDepthwise(), ConvertResizeToLinear(target)]
