"""ClampQuantizedActivations: ExecuTorch's ``QuantizedClampActivationPass`` (a relu, hardtanh
or clamp left after activation fusion becomes a clamp with quantized bounds on the int8
values), deciding what runs on int8 values by the folded quantization parameters.

Before (inside the Cortex-M lowering, quantize / dequantize folded)::

    t = tanh(x_int8)            # re-traced on fake tensors: float32; a Cortex-M kernel later
    y = relu(t)                 # input_qparams int8, output_qparams int8

Upstream's pass reads the input's fake tensor, sees float32 and leaves the ``relu``, which
then runs as a portable kernel on int8 values: clamping at 0 instead of at the zero point
(a tanh, sigmoid or hardsigmoid output chunked or read twice, so not fused). After::

    y = clamp(t, -65, None)     # 0.0 quantized with the output's parameters

A node whose dequantized input was folded into its ``input_qparams`` reads int8 values
whatever the fake tensor of its producer says (the ops that re-trace as float or int32,
``tanh`` on int8 or a linear with its int32 bias, become int8 Cortex-M kernels later).
"""

from __future__ import annotations

import torch
from executorch.backends.cortex_m.passes.quantized_clamp_activation_pass import (
    QuantizedClampActivationPass,
)
from torch.fx import Node


def _per_tensor_int8(qparams) -> bool:
    return qparams is not None and qparams.dtype == torch.int8 and not qparams.per_channel \
        and isinstance(qparams.scale, float) and isinstance(qparams.zp, int)


class ClampQuantizedActivations(QuantizedClampActivationPass):
    """``QuantizedClampActivationPass`` that also takes a node whose folded input and output
    parameters are per-tensor int8."""

    def _is_quantized_int8_activation(self, node: Node) -> bool:
        if super()._is_quantized_int8_activation(node):
            return True
        inputs = node.meta.get("input_qparams") or {}
        outputs = node.meta.get("output_qparams") or {}
        return isinstance(node.args[0] if node.args else None, Node) and \
            _per_tensor_int8(inputs.get(0)) and _per_tensor_int8(outputs.get(0))
