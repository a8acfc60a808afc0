"""Rewrite: the target's ATen passes turn the exported graph into the ops the target quantizes
and converts, and every node gets the id that follows it to the report (``graph.ids``)."""

from __future__ import annotations

from torch.fx import GraphModule

from ..errors import stage
from ..quantization.composed import TargetQuantizer


def rewrite(graph: GraphModule, target, gelu: str | None = None) -> GraphModule:
    """The stage: ``for_annotation``, its failures named as the stage's."""
    with stage("rewriting the model for quantization"):
        return for_annotation(graph, target, gelu)


def for_annotation(graph: GraphModule, target, gelu: str | None = None) -> GraphModule:
    """``graph`` as the target's quantizer annotates it: rewritten by ``default_aten_passes``,
    its nodes tagged."""
    return TargetQuantizer(target, aten_passes=default_aten_passes(target, gelu)) \
        .transform_for_annotation(graph)


def default_aten_passes(target, gelu: str | None = None) -> list:
    """ATen rewrites a target applies before quantization, in order: autocast regions that change
    nothing on a CPU in float32 become the ops they hold; convolutions padded by mode ("same")
    get explicit padding, and 1-D upsampling is the 2-D one of height 1; convolutions and
    pooling on unbatched inputs get a batch of one; 1-D and adaptive max pools and max
    reductions over time or space become the 2-D pools NPUs run; a SiLU and a GLU become sigmoid
    and multiply, quantized where the device rounds them, and a log_softmax the log of a
    softmax; a linear layer with a run-time weight becomes a matmul; recurrent layers become
    single-layer, then elementary ops every NPU converts; steps whose output is never read are
    not computed, a zero initial state costs no recurrent matmul, and per-step outputs are
    gathered without a copy each; attention (with a mask computed from constants, or causal)
    becomes bmm, add and softmax; a tensor made from another's shape alone (``ones_like``) is
    a ``full``; what is computed from constants alone is computed once, into a
    constant (a class token's expand, a bias table's index, a standardised weight, an attention
    mask), so convolutions get plain weights, and a mask before a softmax becomes an add the
    quantizer saturates; a division by a constant is a multiplication by its reciprocal; an
    index by constant indices, a strided window of a tensor (a chomp) and a reflect, replicate
    or circular pad become slices and a concatenation, a repeat of axes of size 1 or an expand a
    broadcast (dropped before an elementwise op, else a multiplication by ones) and another
    repeat a concatenation of copies; a stack is a concatenation; unbinds become selects;
    batched matmuls and layer, group and instance normalization become the bmm, mean and
    elementwise ops NPUs run, each quantized on its own, as do norms, variances, square roots,
    sums and divisions by roots (means, multiplications and reciprocal square roots), and a
    reshape that needs a copy makes it explicit, so the copy is quantized too; a BatchNorm that
    no convolution or linear layer absorbs becomes a depthwise convolution, and a resize of a
    small map that the NPU cannot resize a linear layer over its positions; last, layers that
    share a bias (the unrolled steps of a recurrent layer) each read it through a node of their
    own, so each gets its int32 bias in its own scale; an output concatenating scores in
    [0, 1] with boxes in pixels is left to be assembled from parts each in its own int8 scale
    (the program then returns the parts: ``passes.edge.SplitMixedRangeOutputs``). ``gelu``: a GELU approximation's form
    (``passes.aten.approximate_gelu``) every GELU becomes, None to keep GELU."""
    from ..passes import DecomposeGRU, DecomposeLSTM, DecomposeRNN, SplitGRUByLayers
    from ..passes.aten import (AddBatchDimension, ApproximateGELU, ConvertBatchNormToDepthwise,
                              ConvertConstantIndexToSlices, ConvertDivToMul,
                              ConvertLikeToFull,
                              ConvertPadModeToSlices, ConvertPoolingTo2d, ConvertRepeatToBroadcast,
                              ConvertRepeatToCat, ConvertStridedViewToSlices,
                              ConvertResizeToLinear, ConvertUpsample1dTo2d, DecomposeGLU,
                              DecomposeGroupNorm, DecomposeLayerNorm, DecomposeLogSoftmax,
                              DecomposeMatmul, DecomposeRecurrentCells, DecomposeReshape,
                              DecomposeRoots,
                              DecomposeScaledDotProductAttention, DecomposeSiLU,
                              DecomposeUnbind, FoldConstants,
                              FoldLinearOfZeros, FoldSelectOfCat, InlineDisabledAutocast,
                              LinearOfActivations, MakeConvPaddingExplicit,
                              SaturateAttentionMask, SplitSharedBiases, StackByConcat)
    from ..passes.aten.keep_mixed_range_cat_float import KeepMixedRangeCatFloat

    return [InlineDisabledAutocast(), MakeConvPaddingExplicit(), ConvertUpsample1dTo2d(),
            AddBatchDimension(), ConvertPoolingTo2d(),
            LinearOfActivations(), *([ApproximateGELU(gelu)] if gelu else []),
            DecomposeSiLU(), DecomposeGLU(), DecomposeLogSoftmax(),
            SplitGRUByLayers(), DecomposeGRU(), DecomposeRNN(), DecomposeLSTM(),
            DecomposeRecurrentCells(),
            FoldSelectOfCat(), FoldLinearOfZeros(), DecomposeScaledDotProductAttention(),
            ConvertLikeToFull(), FoldConstants(), SaturateAttentionMask(), ConvertDivToMul(),
            ConvertConstantIndexToSlices(), ConvertStridedViewToSlices(), ConvertPadModeToSlices(),
            ConvertRepeatToBroadcast(), ConvertRepeatToCat(),
            StackByConcat(), DecomposeUnbind(), DecomposeMatmul(),
            DecomposeLayerNorm(), DecomposeGroupNorm(), DecomposeRoots(), DecomposeReshape(),
            ConvertBatchNormToDepthwise(), ConvertResizeToLinear(target), SplitSharedBiases(),
            KeepMixedRangeCatFloat()]
