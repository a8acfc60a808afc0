"""FuseActivations: ExecuTorch's ``ActivationFusionPass`` (a relu, hardtanh, clamp or
hardsigmoid after a convolution, linear, add or max pool folds into that op's output
parameters), with a hardsigmoid's zero point kept as the arithmetic gives it.

A hardsigmoid ``y = clamp(x / 6 + 1/2, 0, 1)`` quantized with ``(s, zp)`` is ``x`` quantized
with ``(6 s, zp + 1 / (2 s))``. Upstream clamps that zero point to the int8 range; where the
hardsigmoid's outputs span a narrow range (``s`` small), ``1 / (2 s)`` is hundreds of steps
and the clamp moves every output: networks the fuzzer drew with everything on the CPU ran
19 output steps off the reference (19.9 against 29.9 dB). The kernels add the zero point as
an int32 output offset before clamping to the int8 range, so it needs no clamp.
"""

from __future__ import annotations

from executorch.backends.cortex_m.passes.activation_fusion_pass import ActivationFusionPass


class FuseActivations(ActivationFusionPass):
    """``ActivationFusionPass`` without the clamp of a fused hardsigmoid's zero point."""

    def _update_qparams_hardsigmoid(self, quant_dict):
        scale = quant_dict["scale"]
        quant_dict["scale"] = scale * 6
        quant_dict["zp"] = quant_dict["zp"] + round(1 / (2 * scale))
