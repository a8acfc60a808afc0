"""Passes on Edge-dialect ExportedPrograms (after ``to_edge``). Which run when, and why
there, is in one list: ``passes.edge.order`` (its stages, and where ours go in ExecuTorch's
Cortex-M pass list)."""

from mcu_npu.passes.edge._io import IOQuantization
from mcu_npu.passes.edge.clamp_quantized_activations import ClampQuantizedActivations
from mcu_npu.passes.edge.decompose_portable_linear import DecomposePortableLinear
from mcu_npu.passes.edge.fuse_activations import FuseActivations
from mcu_npu.passes.edge.linear_biases_aside import RestoreLinearBiases, SetLinearBiasesAside
from mcu_npu.passes.edge.quantize_full_as_integer import QuantizeFullAsInteger
from mcu_npu.passes.edge.refresh_strides import RefreshStrides
from mcu_npu.passes.edge.remove_input_quantize import RemoveInputQuantize
from mcu_npu.passes.edge.remove_output_dequantize import RemoveOutputDequantize
from mcu_npu.passes.edge.take_integer_input import TakeIntegerInput

__all__ = ["ClampQuantizedActivations", "DecomposePortableLinear", "FuseActivations",
           "IOQuantization",
           "QuantizeFullAsInteger", "RefreshStrides", "RemoveInputQuantize",
           "RemoveOutputDequantize", "RestoreLinearBiases", "SetLinearBiasesAside",
           "TakeIntegerInput"]
