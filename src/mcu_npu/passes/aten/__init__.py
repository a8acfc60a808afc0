"""Passes on ATen-dialect graphs (``torch.export(...).module()`` or an ExportedProgram's graph)."""

from mcu_npu.passes.aten._recurrent import ProjSizeNotSupportedError
from mcu_npu.passes.aten.decompose_gru import DecomposeGRU
from mcu_npu.passes.aten.decompose_lstm import DecomposeLSTM
from mcu_npu.passes.aten.decompose_rnn import DecomposeRNN
from mcu_npu.passes.aten.fold_linear_of_zeros import FoldLinearOfZeros
from mcu_npu.passes.aten.fold_select_of_cat import FoldSelectOfCat
from mcu_npu.passes.aten.split_gru_by_layers import SplitGRUByLayers
from mcu_npu.passes.aten.stack_by_concat import StackByConcat

__all__ = ["DecomposeGRU", "DecomposeLSTM", "DecomposeRNN", "FoldLinearOfZeros", "FoldSelectOfCat",
           "ProjSizeNotSupportedError", "SplitGRUByLayers", "StackByConcat"]
