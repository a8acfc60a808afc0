"""Edge op objects under short names, for converters and tests."""

import torch

from ..upstream.private import exir_ops


aten = exir_ops.edge.aten
at = torch.ops.aten  # ATen op packets as the quantizer sees them (an entry's ``aten=``)
qd = exir_ops.edge.quantized_decomposed
dim_order = exir_ops.edge.dim_order_ops

QUANTIZE = (qd.quantize_per_tensor.default, qd.quantize_per_tensor.tensor)
DEQUANTIZE = (qd.dequantize_per_tensor.default, qd.dequantize_per_tensor.tensor)
DEQUANTIZE_PER_CHANNEL = (qd.dequantize_per_channel.default,)
