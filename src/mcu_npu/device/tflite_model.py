"""A converted partition as the compiler hands it on and the host runtime reads it back: the
TFLite flatbuffer and how each of its inputs and outputs maps to a PyTorch tensor.

The converter (``mcu_npu.tflite``) makes these, the NPU compilers compile them, the payload
(``mcu_npu.device.payload``) carries them and the host runtime runs them; this module needs none of
those, so the runtime reads partitions without loading the converter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .delegate_io import inverse


@dataclass(frozen=True)
class IOSpec:
    """How a partition input or output maps to a TFLite tensor.

    ``perm``: the TFLite tensor is the PyTorch tensor permuted by it (the layout).
    ``quantized_outside``: True when the partition's PyTorch side is float and the caller
    quantizes (inputs) or dequantizes (outputs) with ``scale`` / ``zero_point``.
    ``dim_order``: the dim order of the PyTorch tensor in the .pte (contiguous when None).
    """

    name: str
    index: int
    shape: tuple[int, ...]
    perm: tuple[int, ...]
    dtype: str
    scale: float
    zero_point: int
    quantized_outside: bool
    dim_order: tuple[int, ...] | None = None


@dataclass(frozen=True)
class TFLiteModel:
    """A converted partition: the flatbuffer and how its inputs / outputs map to PyTorch.

    ``op_origins[i]`` names the graph node TFLite operator ``i`` was converted from.
    """

    buffer: bytes
    inputs: tuple[IOSpec, ...]
    outputs: tuple[IOSpec, ...]
    op_origins: tuple[str, ...] = ()


def input_array(spec: IOSpec, tensor) -> np.ndarray:
    """Turn a PyTorch input into the array the TFLite tensor expects (layout, quantization)."""
    x = np.asarray(tensor.detach().cpu().numpy() if hasattr(tensor, "detach") else tensor)
    if spec.quantized_outside:
        x = np.clip(np.round(x / spec.scale) + spec.zero_point, -128, 127).astype(np.int8)
    return np.ascontiguousarray(np.transpose(x, spec.perm)).astype(spec.dtype)


def output_array(spec: IOSpec, data: np.ndarray) -> np.ndarray:
    """Turn a TFLite output back into PyTorch layout (and dequantize float boundaries)."""
    x = np.transpose(data, inverse(spec.perm))
    if spec.quantized_outside:
        x = (x.astype(np.float32) - spec.zero_point) * np.float32(spec.scale)
    return np.ascontiguousarray(x)
