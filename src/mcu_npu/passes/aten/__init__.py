"""Passes on ATen-dialect graphs (``torch.export(...).module()`` or an ExportedProgram's graph)."""

from mcu_npu.passes.aten._recurrent import ProjSizeNotSupportedError
from mcu_npu.passes.aten.add_batch_dimension import AddBatchDimension
from mcu_npu.passes.aten.approximate_gelu import ApproximateGELU
from mcu_npu.passes.aten.convert_batch_norm_to_depthwise import ConvertBatchNormToDepthwise
from mcu_npu.passes.aten.convert_constant_index_to_slices import ConvertConstantIndexToSlices
from mcu_npu.passes.aten.convert_div_to_mul import ConvertDivToMul
from mcu_npu.passes.aten.convert_like_to_full import ConvertLikeToFull
from mcu_npu.passes.aten.convert_pad_mode_to_slices import ConvertPadModeToSlices
from mcu_npu.passes.aten.convert_pooling_to_2d import ConvertPoolingTo2d
from mcu_npu.passes.aten.convert_repeat_to_broadcast import ConvertRepeatToBroadcast
from mcu_npu.passes.aten.convert_repeat_to_cat import ConvertRepeatToCat
from mcu_npu.passes.aten.convert_resize_to_linear import ConvertResizeToLinear
from mcu_npu.passes.aten.convert_strided_view_to_slices import ConvertStridedViewToSlices
from mcu_npu.passes.aten.convert_upsample1d_to_2d import ConvertUpsample1dTo2d
from mcu_npu.passes.aten.decompose_glu import DecomposeGLU
from mcu_npu.passes.aten.decompose_group_norm import DecomposeGroupNorm
from mcu_npu.passes.aten.decompose_gru import DecomposeGRU
from mcu_npu.passes.aten.decompose_on_cpu import DecomposeOnCpu, decompose_on_cpu
from mcu_npu.passes.aten.decompose_layer_norm import DecomposeLayerNorm
from mcu_npu.passes.aten.decompose_log_softmax import DecomposeLogSoftmax
from mcu_npu.passes.aten.decompose_lstm import DecomposeLSTM
from mcu_npu.passes.aten.decompose_matmul import DecomposeMatmul
from mcu_npu.passes.aten.decompose_recurrent_cells import DecomposeRecurrentCells
from mcu_npu.passes.aten.decompose_reshape import DecomposeReshape
from mcu_npu.passes.aten.decompose_rnn import DecomposeRNN
from mcu_npu.passes.aten.decompose_roots import DecomposeRoots
from mcu_npu.passes.aten.decompose_silu import DecomposeSiLU
from mcu_npu.passes.aten.decompose_scaled_dot_product_attention import (
    DecomposeScaledDotProductAttention,
)
from mcu_npu.passes.aten.decompose_unbind import DecomposeUnbind
from mcu_npu.passes.aten.fold_constants import FoldConstants
from mcu_npu.passes.aten.fold_input_normalisation import FoldInputNormalisation
from mcu_npu.passes.aten.fold_linear_of_zeros import FoldLinearOfZeros
from mcu_npu.passes.aten.fold_select_of_cat import FoldSelectOfCat
from mcu_npu.passes.aten.inline_disabled_autocast import InlineDisabledAutocast
from mcu_npu.passes.aten.linear_of_activations import LinearOfActivations
from mcu_npu.passes.aten.make_conv_padding_explicit import MakeConvPaddingExplicit
from mcu_npu.passes.aten.saturate_attention_mask import SaturateAttentionMask
from mcu_npu.passes.aten.split_gru_by_layers import SplitGRUByLayers
from mcu_npu.passes.aten.split_shared_biases import SplitSharedBiases
from mcu_npu.passes.aten.stack_by_concat import StackByConcat

__all__ = ["AddBatchDimension", "ApproximateGELU", "ConvertBatchNormToDepthwise",
           "ConvertConstantIndexToSlices",
           "ConvertDivToMul", "ConvertLikeToFull", "ConvertPadModeToSlices", "ConvertPoolingTo2d",
           "ConvertRepeatToBroadcast", "ConvertRepeatToCat", "ConvertResizeToLinear",
           "ConvertStridedViewToSlices", "ConvertUpsample1dTo2d",
           "DecomposeGLU", "DecomposeGRU",
           "DecomposeGroupNorm", "DecomposeLSTM", "DecomposeLogSoftmax",
           "DecomposeLayerNorm", "DecomposeMatmul", "DecomposeOnCpu", "DecomposeRNN",
           "DecomposeRoots",
           "DecomposeRecurrentCells", "DecomposeReshape", "DecomposeScaledDotProductAttention",
           "DecomposeSiLU",
           "DecomposeUnbind",
           "FoldConstants", "FoldInputNormalisation", "FoldLinearOfZeros", "FoldSelectOfCat",
           "InlineDisabledAutocast",
           "LinearOfActivations", "MakeConvPaddingExplicit",
           "ProjSizeNotSupportedError", "SaturateAttentionMask", "SplitGRUByLayers",
           "SplitSharedBiases",
           "StackByConcat", "decompose_on_cpu"]
