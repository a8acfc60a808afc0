"""A Cortex-M cycle model per kernel class, for the ops a program leaves to the CPU.

Each Edge op is put in a kernel class (``op_work``): its *work* is the count that drives its
cost (multiply-accumulates for convolutions and matrix products, elements for elementwise,
pooling, softmax and quantize/dequantize, bytes for transposes and copies), read from the
node's shapes (``meta["val"]``) and arguments. Cycles are ``per_call + coefficient * work``
with one coefficient per class and core (``CORES``).

Where the coefficients come from (``estimate.published`` keeps the figures with sources):

- **Cortex-M33** (DSP extension, no Helium; i.MX RT700): the MAC-bound classes (conv,
  depthwise, fully connected) are fitted to the four MLPerf Tiny v1.3 medians of the
  STM32U575 (Cortex-M33 @ 160 MHz, X-CUBE-AI) expressed in cycles (ms * 160 MHz): DS-CNN
  4.64 M, MobileNetV1-0.25 9.48 M, ResNet-8 17.5 M, autoencoder 0.514 M cycles. The fit is
  least squares in log space of the three per-MAC coefficients over the four models as this
  package lowers them, the other terms held at their assumed values
  (``benchmarks/latency.py --fit`` prints the MACs per class and redoes it). MACs per class
  (conv / depthwise / fully connected): DS-CNN 2.37 M / 0.29 M / 768, MobileNetV1 6.69 M /
  0.80 M / 512, ResNet-8 12.5 M / 0 / 640, autoencoder 0 / 0 / 264 k. Result, rounded:
  conv 1.4, depthwise 2.1, fully connected 1.9 cycles/MAC. Error of the rounded model
  against the figures scaled to 325 MHz: -15%, +20%, +1%, +0.4%.
  The autoencoder alone sets the fully connected coefficient and ResNet-8 nearly alone the
  conv one; DS-CNN and MobileNetV1 share the depthwise one, so their residuals are the
  model's real test. X-CUBE-AI runs ST's own kernels, not CMSIS-NN; the two CMSIS-NN
  Cortex-M33 submissions (EK-RA6M4, TFLite Micro, 2021; nRF5340, microTVM, 2022) took
  1.6-3.4x more cycles with CMSIS-NN versions that predate the current kernels, so the
  model follows the newest Cortex-M33 figures and lists those beside them.
- **Cortex-M55 / M85** (Helium): the same fit on the EK-RA8D1 (Cortex-M85 @ 480 MHz,
  TFLite Micro + CMSIS-NN) MLPerf Tiny v1.2 medians (ms * 480 MHz): DS-CNN 1.66 M,
  MobileNetV1-0.25 6.43 M, ResNet-8 4.07 M, autoencoder 0.255 M cycles. Result, rounded:
  conv 0.32, depthwise 4.1, fully connected 0.94 cycles/MAC; error on the Cortex-M85 of
  corstone-320 (figures scaled to 1 GHz): +17%, -14%, -0.2%, -0.4%. The large
  depthwise figure carries whatever makes MobileNetV1 slow on that board beyond its MACs
  (many small layers; depthwise layers of 8-64 channels fill one or a few 16-lane vectors),
  so it is a fitted figure, not a kernel's speed.
  No MLPerf Tiny result for a Cortex-M55 was found; the M55 takes the M85's coefficients
  (both run Helium with the same CMSIS-NN kernels), optimistic by the M85's faster scalar
  pipeline.
- A depthwise op with a channel multiplier other than 1 (DS-CNN's first layer: one input
  channel, 64 outputs) runs CMSIS-NN's channel-multiplier loop, a dense convolution per
  input channel, and is costed as conv, as the published engines ran that layer.
- Per-element and per-byte classes (elementwise, pooling, softmax, transposes and copies,
  quantize / dequantize) and the per-call overhead are **assumed** from instruction counts
  of the kernels' inner loops (stated per row below), except the Helium cores' quantize:
  9 cycles per element, the one published per-kernel figure found (ExecuTorch's
  ``cortex_m::quantize_per_tensor`` on an Alif E8 Cortex-M55, ``published.KERNEL_FIGURES``;
  tests hold the model within ``KERNEL_FACTOR`` of it).
  In the MLPerf Tiny models they are under 5% of the time.
- Portable kernels (float, or int8 without CMSIS-NN) are **assumed** scalar loops: a float
  multiply-accumulate costs a load pair, a fused multiply-add and index arithmetic of the
  portable kernels' generic loops (no SIMD), about 8 cycles on these cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from ..graph.schema import bind


@dataclass(frozen=True, kw_only=True)
class CoreModel:
    """Cycle coefficients of one Cortex-M core (cycles per unit of work per kernel class)."""

    name: str
    simd: str
    per_mac: dict
    """Kernel class -> cycles per multiply-accumulate (conv, depthwise, fully_connected,
    float_mac)."""
    per_element: dict
    """Kernel class -> cycles per element (elementwise, pooling, softmax, quantize,
    dequantize, float_element, int8_element)."""
    per_byte: dict
    """Kernel class -> cycles per byte moved (transpose, copy)."""
    per_call: int
    """Cycles of one kernel call outside its loops: the runtime's dispatch and the kernel's
    set-up (assumed)."""
    published: frozenset = frozenset()
    """Per-element classes whose coefficient is a published kernel's cycles
    (``estimate.published.KERNEL_FIGURES``), not an assumption."""
    basis: str
    """The published figures the MAC coefficients were fitted to."""


_DSP_ASSUMED = {
    # arm_elementwise_add_s8 / mul_s8 with the DSP extension: 4 lanes per iteration, ~20
    # instructions (loads, SXTB16, SMLAD-based requantize, saturate, store)
    "elementwise": 5.0,
    # avg/max pool: one add or compare per input element of the window
    "pooling": 1.5,
    # arm_softmax_s8: exp via a fixed-point polynomial, two passes over the row
    "softmax": 30.0,
    # per-tensor quantize / dequantize: one float multiply, round and clamp per element
    "quantize": 8.0,
    "dequantize": 6.0,
    # portable kernels: scalar loops with the generic index arithmetic
    "float_element": 12.0,
    "int8_element": 10.0,
}
_HELIUM_ASSUMED = {
    # the same kernels with 16 lanes per MVE instruction, two beats per cycle
    "elementwise": 1.5,
    "pooling": 0.5,
    "softmax": 12.0,
    # published: ExecuTorch's cortex_m quantize_per_tensor took 1,365,831 cycles for a
    # 3x224x224 float input on an Alif E8 Cortex-M55 (9.07 per element; estimate.published
    # KERNEL_FIGURES), far from the 16 lanes per MVE loop of its Helium path
    # (backends/cortex_m/ops/op_quantize_per_tensor.cpp); the dequantize stays assumed
    "quantize": 9.0,
    "dequantize": 1.5,
    "float_element": 12.0,
    "int8_element": 10.0,
}

CORTEX_M33 = CoreModel(
    name="cortex-m33", simd="DSP extension (no Helium)",
    per_mac={"conv": 1.4, "depthwise": 2.1, "fully_connected": 1.9, "float_mac": 8.0},
    per_element=_DSP_ASSUMED,
    # a transpose moves one byte per load/store pair with index arithmetic; a contiguous
    # copy (memcpy) moves 4 bytes per word load/store
    per_byte={"transpose": 4.0, "copy": 0.5},
    per_call=400,
    basis="the MLPerf Tiny v1.3 STM32U575 (Cortex-M33, X-CUBE-AI) medians",
)

CORTEX_M85 = CoreModel(
    name="cortex-m85", simd="Helium (MVE)",
    per_mac={"conv": 0.32, "depthwise": 4.1, "fully_connected": 0.94, "float_mac": 8.0},
    per_element=_HELIUM_ASSUMED,
    per_byte={"transpose": 2.0, "copy": 0.25},
    per_call=300, published=frozenset({"quantize"}),
    basis="the MLPerf Tiny v1.2 EK-RA8D1 (Cortex-M85, TFLite Micro + CMSIS-NN) medians",
)

CORTEX_M55 = CoreModel(
    name="cortex-m55", simd="Helium (MVE)",
    per_mac=CORTEX_M85.per_mac, per_element=CORTEX_M85.per_element,
    per_byte=CORTEX_M85.per_byte, per_call=CORTEX_M85.per_call,
    published=CORTEX_M85.published,
    basis=("the Cortex-M85's figures (EK-RA8D1; no MLPerf Tiny result names a Cortex-M55)"),
)

CORES = {c.name: c for c in (CORTEX_M33, CORTEX_M55, CORTEX_M85)}


def core_model(core: str) -> CoreModel:
    """The cycle model of ``core`` ("cortex-m33", "cortex-m55", "cortex-m85")."""
    try:
        return CORES[core]
    except KeyError:
        raise ValueError(f"no cycle model for CPU {core!r}; known: {', '.join(CORES)}") \
            from None


# kernel class of each op (its Edge name without the overload), with the unit of its work
_CORTEX_M = {
    "cortex_m.quantized_conv2d": "conv", "cortex_m.quantized_conv2d_nhwc": "conv",
    "cortex_m.quantized_transpose_conv2d": "conv",
    "cortex_m.quantized_transpose_conv2d_nhwc": "conv",
    "cortex_m.quantized_depthwise_conv2d": "depthwise",
    "cortex_m.quantized_depthwise_conv2d_nhwc": "depthwise",
    "cortex_m.quantized_linear": "fully_connected",
    "cortex_m.quantized_batch_matmul": "fully_connected",
    "cortex_m.quantized_add": "elementwise", "cortex_m.quantized_mul": "elementwise",
    "cortex_m.quantized_div": "elementwise", "cortex_m.quantized_activation": "elementwise",
    "cortex_m.minimum": "elementwise", "cortex_m.maximum": "elementwise",
    "cortex_m.quantized_avg_pool2d": "pooling", "cortex_m.quantized_avg_pool2d_nhwc": "pooling",
    "cortex_m.quantized_max_pool2d": "pooling", "cortex_m.quantized_max_pool2d_nhwc": "pooling",
    "cortex_m.softmax": "softmax",
    "cortex_m.transpose": "transpose",
    "cortex_m.pad": "copy",
    "cortex_m.quantize_per_tensor": "quantize",
    "cortex_m.dequantize_per_tensor": "dequantize",
}
_PORTABLE = {
    "aten.convolution": "conv", "aten.linear": "fully_connected",
    "aten.addmm": "fully_connected", "aten.mm": "fully_connected",
    "aten.bmm": "fully_connected",
    "aten.permute_copy": "transpose", "aten.transpose_copy": "transpose",
    "aten.clone": "copy", "dim_order_ops._clone_dim_order": "copy",
    "dim_order_ops._to_dim_order_copy": "copy", "aten._to_copy": "copy",
    "aten.cat": "copy", "aten.slice_copy": "copy", "aten.constant_pad_nd": "copy",
    "aten.select_copy": "copy", "aten.split_copy": "copy", "aten.split_with_sizes_copy": "copy",
    "aten.expand_copy": "copy", "aten.repeat": "copy",
    "aten.avg_pool2d": "pooling", "aten.max_pool2d": "pooling",
    "aten.max_pool2d_with_indices": "pooling", "aten._adaptive_avg_pool2d": "pooling",
    "aten.mean": "pooling", "aten._softmax": "softmax", "aten._log_softmax": "softmax",
    "quantized_decomposed.quantize_per_tensor": "quantize",
    "quantized_decomposed.quantize_per_channel": "quantize",
    "quantized_decomposed.dequantize_per_tensor": "dequantize",
    "quantized_decomposed.dequantize_per_channel": "dequantize",
}
# no work at run time: ExecuTorch turns these into views of their input (et_view)
VIEWS = frozenset({"aten.view_copy", "aten.squeeze_copy", "aten.unsqueeze_copy",
                   "aten.alias_copy", "aten._unsafe_view"})


def _op_without_overload(node) -> str:
    """``namespace.name`` of a call's op, without the overload ("aten.permute_copy")."""
    name = getattr(node.target, "__name__", str(node.target))
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else name


def _val(node):
    return node.meta.get("val") if hasattr(node, "meta") else None


def _numel(t) -> int:
    return math.prod(int(d) for d in t.shape) if t is not None and hasattr(t, "shape") else 0


def _nbytes(t) -> int:
    return _numel(t) * t.element_size() if t is not None and hasattr(t, "element_size") else 0


def _arg_val(node, i: int):
    return _val(node.args[i]) if len(node.args) > i and hasattr(node.args[i], "meta") else None


def _macs(node, name: str, kind: str) -> int:
    """Multiply-accumulates of a conv / depthwise / matrix op, from its shapes."""
    out, x, w = _val(node), _arg_val(node, 0), _arg_val(node, 1)
    if name.startswith("aten."):
        from ..graph.macs import node_macs

        return node_macs(node)
    if x is None or w is None:
        return 0
    if "transpose_conv2d" in name:  # every input element meets every output channel's kernel
        cin = int(x.shape[-1] if name.endswith("nhwc") else x.shape[1])
        return _numel(x) * _numel(w) // max(cin, 1)
    if kind == "conv":  # weight (Cout, kh, kw, Cin) or (Cout, Cin, kh, kw): Cin*kh*kw per output
        return _numel(out) * _numel(w) // int(w.shape[0])
    if kind == "depthwise":  # weight (1, kh, kw, Cout) or (Cout, 1, kh, kw)
        c = int(w.shape[-1] if name.endswith("nhwc") else w.shape[0])
        return _numel(out) * _numel(w) // max(c, 1)
    if name == "cortex_m.quantized_batch_matmul":  # lhs (.., M, K), rhs transposed (.., N, K)
        rhs = _arg_val(node, 2)
        return _numel(out) * int(rhs.shape[-1])
    return _numel(out) * int(w.shape[-1])  # linear: weights (out, in)


def _depth_multiplier(node) -> int:
    """The ``depth_multiplier`` argument of a Cortex-M depthwise convolution (1 if absent)."""
    value = getattr(bind(node), "depth_multiplier", 1)
    return int(value) if isinstance(value, int) else 1


def _pool_elements(node, name: str) -> int:
    """Input elements a pooling op reads: output elements times the window."""
    out = _val(node)
    if name in ("aten._adaptive_avg_pool2d", "aten.mean"):
        return _numel(_arg_val(node, 0))
    kernel = node.args[1] if len(node.args) > 1 else None
    if isinstance(kernel, (list, tuple)) and kernel:
        return _numel(out) * math.prod(int(k) for k in kernel)
    return _numel(_arg_val(node, 0))


@dataclass(frozen=True)
class Work:
    """What a CPU op costs, before a core's coefficients: its kernel class, where it runs
    ("cortex-m" or "portable"), the unit and amount of work."""

    kind: str
    runs_on: str
    unit: str
    amount: int
    float_data: bool = False


def op_work(node) -> Work | None:
    """The work of one CPU op, or None for ops that do nothing at run time (views,
    ``getitem``, memory allocation) and ops outside the table."""
    name = _op_without_overload(node)
    if name in VIEWS:
        return None
    if name in _CORTEX_M:
        kind, runs_on = _CORTEX_M[name], "cortex-m"
    elif name in _PORTABLE:
        kind, runs_on = _PORTABLE[name], "portable"
    elif name.startswith("aten."):
        kind, runs_on = "elementwise", "portable"
    else:
        return None
    out = _val(node)
    if isinstance(out, (list, tuple)):
        out = out[0] if out else None
    if not isinstance(out, torch.Tensor):
        return None  # no shape to cost it by
    float_data = isinstance(out, torch.Tensor) and out.dtype.is_floating_point \
        and kind not in ("quantize", "dequantize")
    if kind in ("conv", "depthwise", "fully_connected"):
        macs = _macs(node, name, kind)
        if kind == "depthwise" and _depth_multiplier(node) != 1:
            kind = "conv"  # CMSIS-NN's channel-multiplier loop: a dense conv per input channel
        return Work(kind, runs_on, "MACs", macs, float_data)
    if kind in ("transpose", "copy"):
        return Work(kind, runs_on, "bytes", _nbytes(out), float_data)
    if kind == "pooling":
        return Work(kind, runs_on, "elements", _pool_elements(node, name), float_data)
    if kind == "dequantize":  # its work is the int8 input it reads
        return Work(kind, runs_on, "elements", _numel(_arg_val(node, 0)), float_data)
    return Work(kind, runs_on, "elements", _numel(out), float_data)


def work_cycles(work: Work, core: CoreModel) -> tuple[float, str]:
    """(cycles, basis) of ``work`` on ``core``: a CMSIS-NN class at its coefficient, a
    portable kernel at the scalar float or int8 coefficient. The basis is a short label,
    "fitted" for coefficients fitted to published figures, "assumed" for the others."""
    portable = work.runs_on == "portable"
    source = "assumed"
    if work.unit == "MACs":
        if not portable:
            key, coeff, source = work.kind, core.per_mac[work.kind], "fitted"
        elif work.float_data:
            key, coeff = "float_mac", core.per_mac["float_mac"]
        else:
            key, coeff = "int8_element", core.per_element["int8_element"]
        unit = "MAC"
    elif work.unit == "bytes":
        key, coeff, unit = work.kind, core.per_byte[work.kind], "B"
    else:
        key = work.kind
        if portable and work.kind not in ("quantize", "dequantize"):
            key = "float_element" if work.float_data else "int8_element"
        coeff, unit = core.per_element[key], "elem"
        if key in core.published and not portable:
            source = "published"
    return core.per_call + coeff * work.amount, f"{key} {coeff:g} cyc/{unit} ({source})"
