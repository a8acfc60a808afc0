"""Quantization specs whose choices TFLite int8 and 16x8 kernels accept.

Activations: int8 asymmetric per-tensor, or (``int16=True``, the 16x8 kernels) int16
symmetric per-tensor with zero point 0, as TFLite's int16 kernels require. Weights: int8 symmetric per-channel (range
[-127, 127], as TFLite requires). Bias: int32 with scale = input scale * weight scale, zero
point 0. An activation's range is its calibration method's (``calibration``: ``auto`` by
default, which picks per tensor; ``minmax`` is ``MinMaxObserver``). Outputs of sigmoid, tanh and softmax: the fixed parameters the TFLite int8 kernels
demand, so the converter never needs a requantize for them (int16: scale 1/32768, zero
point 0). The bias of an int16 layer stays an int32 here (PT2E has no int64 quantize); the
converter widens it to the int64 the 16x8 kernels read, value for value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torchao.quantization.pt2e.fake_quantize import FakeQuantize
from torchao.quantization.pt2e.observer import (
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    PerChannelMinMaxObserver,
)
from torchao.quantization.pt2e.quantizer import (
    DerivedQuantizationSpec,
    FixedQParamsQuantizationSpec,
    QuantizationSpec,
)

from .calibration import DEFAULT, check_method

INT8_MIN, INT8_MAX = -128, 127
INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

# Output parameters fixed by the TFLite int8 kernels (scale, zero point).
FIXED_QPARAMS = {
    "sigmoid": (1.0 / 256.0, -128),
    "softmax": (1.0 / 256.0, -128),
    "tanh": (1.0 / 128.0, 0),
}
FIXED_QPARAMS_INT16 = {kind: (1.0 / 32768.0, 0) for kind in FIXED_QPARAMS}
"""The same for TFLite's int16 LOGISTIC, TANH and SOFTMAX."""

MASKED_BELOW = -1e30
"""A masked attention score (``SaturateAttentionMask``: a score plus ``finfo.min``) is below."""
MASK_MARGIN = math.log(2048.0)
"""How far below the lowest kept score masked ones saturate: exp(-margin) is an eighth of an
int8 softmax output step, so a masked weight rounds to 0 even after the scores' own rounding
and the kernel's exp approximation (half a step, ln(512), is not enough: measured)."""


class MaskedScoresObserver(MinMaxObserver):
    """Min / max of attention scores over the kept positions only (masked ones are below
    ``MASKED_BELOW``), the minimum lowered by ``MASK_MARGIN``: masked scores saturate to the
    floor of the range, which is far enough below every kept score to weigh nothing."""

    def forward(self, x_orig):
        x = x_orig.detach()
        kept = x[x > MASKED_BELOW]
        if kept.numel():
            super().forward(torch.stack([kept.min() - MASK_MARGIN, kept.max()]))
        return x_orig


@dataclass(frozen=True)
class QuantSpecs:
    """The set of specs one quantizer hands out; ``is_qat`` picks fake-quantize modules,
    ``int16`` int16 activations (symmetric, for the 16x8 kernels) instead of int8,
    ``calibration`` the calibration method of activations (``calibration.METHODS``; QAT's
    fake quantizers follow their moving-average min / max whatever it says)."""

    is_qat: bool = False
    int16: bool = False
    calibration: str = DEFAULT

    @property
    def activation_dtype(self) -> torch.dtype:
        return torch.int16 if self.int16 else torch.int8

    @property
    def activation(self) -> QuantizationSpec:
        qscheme = torch.per_tensor_symmetric if self.int16 else torch.per_tensor_affine
        if self.is_qat:
            ctr = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, qscheme=qscheme)
        else:
            ctr = activation_observer(self.calibration, eps=2**-20, qscheme=qscheme)
        low, high = (INT16_MIN, INT16_MAX) if self.int16 else (INT8_MIN, INT8_MAX)
        return QuantizationSpec(
            dtype=self.activation_dtype,
            quant_min=low,
            quant_max=high,
            qscheme=qscheme,
            observer_or_fake_quant_ctr=ctr,
        )

    def weight(self, ch_axis: int = 0) -> QuantizationSpec:
        if self.is_qat:
            ctr = FakeQuantize.with_args(observer=MovingAveragePerChannelMinMaxObserver)
        else:
            ctr = PerChannelMinMaxObserver.with_args(eps=2**-20)
        return QuantizationSpec(
            dtype=torch.int8,
            quant_min=-INT8_MAX,
            quant_max=INT8_MAX,
            qscheme=torch.per_channel_symmetric,
            ch_axis=ch_axis,
            observer_or_fake_quant_ctr=ctr,
        )

    @property
    def masked_scores(self) -> QuantizationSpec:
        """Attention scores after an additive mask: ``MaskedScoresObserver``'s range."""
        spec = self.activation
        if self.is_qat:
            ctr = FakeQuantize.with_args(observer=MaskedScoresObserver, qscheme=spec.qscheme)
        else:
            ctr = MaskedScoresObserver.with_args(eps=2**-20, qscheme=spec.qscheme)
        return QuantizationSpec(dtype=spec.dtype, quant_min=spec.quant_min,
                                quant_max=spec.quant_max, qscheme=spec.qscheme,
                                observer_or_fake_quant_ctr=ctr)

    def attention_mask(self, scores_edge) -> DerivedQuantizationSpec:
        """The 0 / ``finfo.min`` mask added to the scores read over ``scores_edge`` (whose
        sum is quantized by ``masked_scores``): 0 exact, and the lowest integer worth the
        scores' span plus ``MASK_MARGIN``, so a masked score lands below the sum's floor."""
        spec = self.activation
        low, high = spec.quant_min, spec.quant_max
        symmetric = spec.qscheme == torch.per_tensor_symmetric

        def derive(observers):
            obs = observers[0]
            span = max(float(obs.max_val) - float(obs.min_val), 0.0) + MASK_MARGIN
            scale = span / (-low if symmetric else high - low)
            zero_point = 0 if symmetric else high
            return torch.tensor(scale, dtype=torch.float32), \
                torch.tensor(zero_point, dtype=torch.int32)

        return DerivedQuantizationSpec(derived_from=[scores_edge], derive_qparams_fn=derive,
                                       dtype=spec.dtype, quant_min=low, quant_max=high,
                                       qscheme=spec.qscheme)

    @property
    def per_tensor_weight(self) -> QuantizationSpec:
        """Per-tensor int8 for small parameter tensors such as PReLU slopes (as activations)."""
        return QuantSpecs(is_qat=self.is_qat, calibration="minmax").activation

    def fixed(self, kind: str) -> FixedQParamsQuantizationSpec:
        scale, zero_point = (FIXED_QPARAMS_INT16 if self.int16 else FIXED_QPARAMS)[kind]
        low, high = (INT16_MIN, INT16_MAX) if self.int16 else (INT8_MIN, INT8_MAX)
        return FixedQParamsQuantizationSpec(
            dtype=self.activation_dtype,
            scale=scale,
            zero_point=zero_point,
            quant_min=low,
            quant_max=high,
            qscheme=torch.per_tensor_affine,
        )

    @staticmethod
    def bias(act_edge, weight_edge, per_channel: bool = True) -> DerivedQuantizationSpec:
        """int32 bias whose scale is the product of the input and weight scales."""

        def derive(observers):
            act_scale, _ = observers[0].calculate_qparams()
            w_scale, _ = observers[1].calculate_qparams()
            scale = (act_scale * w_scale).to(torch.float32)
            return scale, torch.zeros_like(scale, dtype=torch.int32)

        return DerivedQuantizationSpec(
            derived_from=[act_edge, weight_edge],
            derive_qparams_fn=derive,
            dtype=torch.int32,
            quant_min=INT32_MIN,
            quant_max=INT32_MAX,
            qscheme=torch.per_channel_symmetric if per_channel else torch.per_tensor_symmetric,
            ch_axis=0,
        )


def activation_observer(method: str, **kwargs):
    """The observer constructor (``with_args(**kwargs)``) of an activation calibrated by
    ``method``: ``MinMaxObserver`` itself for "minmax", ``CalibrationObserver`` otherwise."""
    if check_method(method) == "minmax":
        return MinMaxObserver.with_args(**kwargs)
    from .calibration.observer import CalibrationObserver

    return CalibrationObserver.with_args(method=method, **kwargs)
