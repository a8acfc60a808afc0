"""The Cortex-M side of a target: what the NPU leaves runs as int8 CMSIS-NN kernels.

After the NPU partitions are delegated, ExecuTorch's Cortex-M pass manager (explicit-layout
pipeline) replaces every remaining quantized pattern that has a Cortex-M kernel by a
``cortex_m::`` op; convolutions run channels-last between explicit transposes, and
quantize/dequantize become the Cortex-M ones. Delegate calls pass through untouched.

Which CPU nodes the Cortex-M kernels take is decided before quantization, from the rules of
that pipeline (``cortex_m_rejection``): a node they cannot take is not given Cortex-M
quantization, so it runs as a portable float kernel between quantize / dequantize, and the
plan records why (``Plan.portable``).
"""

from __future__ import annotations

import torch
from executorch.exir.pass_base import ExportedProgramPassBase
from executorch.exir.pass_manager import ExportedProgramPassManager
from torch.export import ExportedProgram
from torch.fx import Node

from ..graph.schema import bind
from ..errors import ConfigError

NAMESPACE = "cortex_m"


def cortex_m_core(target) -> str | None:
    """The Cortex-M core that runs ``target``'s leftover ops as int8 kernels, if any
    (``CpuSpec.int8_kernels``).

    """
    if target.cpu is None or not target.cpu.int8_kernels:
        return None
    return target.cpu.core


def _target_config(core: str):
    from executorch.backends.cortex_m.target_config import CortexMTargetConfig

    try:
        return CortexMTargetConfig.from_target_string(core)
    except ValueError as exc:
        raise ConfigError(f"no Cortex-M kernels for CPU {core!r}: {exc}") from None


aten = torch.ops.aten
_CONV_RANK = {aten.conv1d.default: 3, aten.conv2d.default: 4,
              aten.conv_transpose2d.input: 4}
_NO_KERNEL = {aten.conv_transpose1d.default: "ConvTranspose1d",
              aten.conv3d.default: "3-D convolution",
              aten.conv_transpose3d.input: "3-D transposed convolution"}
_SELECTS = {aten.where.self, aten.eq.Tensor, aten.eq.Scalar, aten.ne.Tensor, aten.ne.Scalar,
            aten.gt.Tensor, aten.gt.Scalar, aten.ge.Tensor, aten.ge.Scalar, aten.lt.Tensor,
            aten.lt.Scalar, aten.le.Tensor, aten.le.Scalar}
"""Comparisons and ``where``: no Cortex-M kernel; its quantizer would only tie their operands
into one quantization group, which next to an NPU node's parameters recurses without end in
torchao's prepare. They run as portable kernels on float values."""
_POOLS = {aten.max_pool2d.default, aten.max_pool2d_with_indices.default,
          aten.avg_pool2d.default}


def _rank(node) -> int | None:
    val = node.meta.get("val") if isinstance(node, Node) else None
    if isinstance(val, (list, tuple)) and val:  # max_pool2d_with_indices: (values, indices)
        val = val[0]
    return val.dim() if isinstance(val, torch.Tensor) else None


def _pair(value, default) -> tuple:
    if value is None or value == []:
        return default
    return tuple(value) * (2 // len(value)) if isinstance(value, (list, tuple)) else (value,) * 2


def cortex_m_rejection(node: Node) -> str | None:
    """Why ExecuTorch's Cortex-M lowering (explicit layout) would not turn ATen node ``node``
    into a Cortex-M kernel although its quantizer annotates it, or None. These are the
    conditions of its channels-last rewrite (``explicit_layout_pass``: a convolution or
    pooling is lowered only on a rank-4 tensor read straight from a dequantize; max pooling
    without dilation or ceil mode, average pooling without a divisor override) and the ops
    it has no kernel for. A node it cannot take runs as a portable float kernel."""
    if node.op != "call_function" or not node.args:
        return None
    op = node.target
    if op in _NO_KERNEL:
        return f"the Cortex-M kernels have no {_NO_KERNEL[op]}"
    if op in _SELECTS:
        return f"the Cortex-M kernels have no {getattr(op, '__name__', op)}"
    rank = _rank(node)  # a convolution's or pooling's output has its input's rank
    if op in _CONV_RANK and rank is not None and rank != _CONV_RANK[op]:
        return (f"the Cortex-M convolution kernels need a batched input of rank "
                f"{_CONV_RANK[op]}; this one has rank {rank}")
    if op in _POOLS:
        if rank is not None and rank != 4:
            return (f"the Cortex-M pooling kernels need a batched (N, C, H, W) input; this "
                    f"one has rank {rank}")
        if op == aten.avg_pool2d.default:
            a = bind(node)
            if a.divisor_override is not None:
                return "the Cortex-M average pooling kernel has no divisor override"
            if a.ceil_mode:
                return "the Cortex-M average pooling kernel has no ceil mode"
        else:
            a = bind(node)
            if _pair(a.dilation, (1, 1)) != (1, 1):
                return "the Cortex-M max pooling kernel has no dilation"
            if a.ceil_mode:
                return "the Cortex-M max pooling kernel has no ceil mode"
    return None


def _lowering_passes() -> list:
    """ExecuTorch's explicit-layout pass list with ours spliced in, its final validation
    left out (``passes.edge.order.CORTEX_M_SPLICE`` says where and why)."""
    from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager

    from ..passes.edge.order import spliced

    return spliced(CortexMPassManager.explicit_layout_pass_list)


class CortexMLowering(ExportedProgramPassBase):
    """Edge program -> the same program with Cortex-M int8 kernels for the CPU's ops: the
    passes of its stage (``passes.edge.order.CORTEX_M_LOWERING``: a quantized ``full`` made
    in int8), then the explicit-layout passes as ``CortexMPassManager`` runs them, less
    those that find nothing to rewrite in this graph (``cortex_m_pass_skips``)."""

    def __init__(self, core: str):
        self.core = core

    def call(self, exported_program: ExportedProgram):
        from executorch.exir.pass_base import ExportedProgramPassResult

        from ..passes.edge.order import CORTEX_M_LOWERING
        from .cortex_m_pass_skips import run_passes

        for first in CORTEX_M_LOWERING.passes:
            first()(exported_program)
        lowered = run_passes(exported_program, _lowering_passes(),
                             _target_config(self.core))
        return ExportedProgramPassResult(lowered, True)


def cortex_m_passes(core: str) -> ExportedProgramPassManager:
    """``EdgeProgramManager.transform`` argument that lowers the CPU's ops for ``core``."""
    return ExportedProgramPassManager([CortexMLowering(core)])


def lower_to_cortex_m(edge, core: str):
    """``edge`` (an ``EdgeProgramManager``, NPU partitions already delegated) with the CPU's
    quantized ops on Cortex-M kernels."""
    return edge.transform(cortex_m_passes(core))


def is_cortex_m(node: Node) -> bool:
    """A call to a Cortex-M kernel (Edge dialect)."""
    return node.op == "call_function" and \
        getattr(node.target, "namespace", "") == NAMESPACE
