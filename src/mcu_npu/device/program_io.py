"""Program I/O in int8 (``compile(..., io="int8")``): the host-side conversions of a
program's inputs and outputs with the parameters its report records (``flow.int8_io``
removes the boundary quantize / dequantize from the lowered program)."""

from __future__ import annotations

import torch

from ..errors import InputError


def _quantized_decomposed():
    from ..upstream.private import quantized_decomposed_ops  # noqa: F401  (registers the ops)

    return torch.ops.quantized_decomposed


def quantize_inputs(io: dict, inputs) -> tuple[torch.Tensor, ...]:
    """Quantize each float input the way the program's own quantize would have (the same
    op and parameters, so results match the float-I/O program bit for bit); inputs without
    parameters (``io`` empty: a float-I/O program) pass through."""
    specs = (io or {}).get("inputs", [])
    if len(specs) not in (0, len(inputs)):
        raise InputError(f"the program takes {len(specs)} inputs but {len(inputs)} were given")
    out = []
    for i, x in enumerate(inputs):
        spec = specs[i] if specs else {}
        if spec.get("scale") is None or not x.dtype.is_floating_point:
            out.append(x)
            continue
        out.append(_quantized_decomposed().quantize_per_tensor(
            x.to(torch.float32), spec["scale"], spec["zero_point"], spec["quant_min"],
            spec["quant_max"], getattr(torch, spec["dtype"])))
    return tuple(out)


def dequantize_outputs(io: dict, outputs) -> list[torch.Tensor]:
    """Dequantize each integer output with its reported parameters; the rest pass through.
    The parts of a split output (``io["assemble"]``) are put back together after."""
    specs = (io or {}).get("outputs", [])
    out = []
    for i, y in enumerate(outputs):
        spec = specs[i] if i < len(specs) else {}
        if spec.get("scale") is None or y.dtype.is_floating_point:
            out.append(y)
            continue
        out.append(_quantized_decomposed().dequantize_per_tensor(
            y, spec["scale"], spec["zero_point"], spec["quant_min"], spec["quant_max"],
            getattr(torch, spec["dtype"])))
    if (io or {}).get("assemble") and len(outputs) == len(specs):
        from .output_parts import assemble

        return assemble(io["assemble"], out)
    return out
