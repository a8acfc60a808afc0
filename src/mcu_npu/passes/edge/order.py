"""The order of the Edge-dialect passes a compile runs after quantization, in one place.

``EDGE_STAGES`` lists the stages in the order they run: each stage's passes (ours, in the
order it runs them), the function that runs it, and why it runs there. Those functions take
their passes from their stage here. The Cortex-M lowering runs ExecuTorch's explicit-layout
pass list with ours spliced in: ``CORTEX_M_SPLICE`` says where, each rule anchored on an
upstream pass by its class name (the list holds an Arm backend pass, which this package
does not import), and ``spliced`` applies the rules.

It lives in ``passes.edge`` because both the compile flow (``flow``) and the Cortex-M
lowering (``backend``) read it, and ``flow`` imports ``backend``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mcu_npu.passes.edge.clamp_quantized_activations import ClampQuantizedActivations
from mcu_npu.passes.edge.decompose_portable_linear import DecomposePortableLinear
from mcu_npu.passes.edge.fuse_activations import FuseActivations
from mcu_npu.passes.edge.linear_biases_aside import RestoreLinearBiases, SetLinearBiasesAside
from mcu_npu.passes.edge.quantize_full_as_integer import QuantizeFullAsInteger
from mcu_npu.passes.edge.refresh_strides import RefreshStrides
from mcu_npu.passes.edge.remove_input_quantize import RemoveInputQuantize
from mcu_npu.passes.edge.remove_output_dequantize import RemoveOutputDequantize
from mcu_npu.passes.edge.split_mixed_range_outputs import SplitMixedRangeOutputs
from mcu_npu.passes.edge.state_as_buffers import StateAsBuffers
from mcu_npu.passes.edge.take_integer_input import TakeIntegerInput


@dataclass(frozen=True)
class EdgeStage:
    """One stage of the Edge program's way to the ``.pte``: ``passes`` (ours, in the order
    the stage runs them; none for a stage that only calls ExecuTorch), ``runs_in`` (the
    function running it, under ``mcu_npu``) and why it runs where it does."""

    passes: tuple[type, ...]
    runs_in: str
    why: str


INTEGER_INPUTS = EdgeStage(
    (TakeIntegerInput,), "flow.int8_io.take_integer_inputs",
    "once, before the Edge graph is planned: a uint8 / int16 input declared as the sensor "
    "gives it becomes a placeholder of its type, read first by its partition")
REFRESH_STRIDES = EdgeStage(
    (RefreshStrides,), "flow.lower.lower",
    "from here on once per memory placement lowered, before partitioning: strides made as "
    "the ops give them, so no partition is converted from stale ones")
DELEGATION = EdgeStage(
    (), "flow.lower._delegated",
    "the plan's NPU partitions delegated (NpuPartitioner), each keeping only its interface")
CORTEX_M_LOWERING = EdgeStage(
    (QuantizeFullAsInteger,), "backend.cortex_m.CortexMLowering.call",
    "on a target with Cortex-M kernels, after delegation (delegate calls pass through): a "
    "quantized full made int8, which the lowering would leave float, then ExecuTorch's "
    "explicit-layout passes with ours spliced in (CORTEX_M_SPLICE)")
PORTABLE_LINEAR = EdgeStage(
    (DecomposePortableLinear,), "flow.lower.lower",
    "after the Cortex-M lowering, where a linear left is a float one: the portable kernels "
    "have no linear")
STATE = EdgeStage(
    (StateAsBuffers,), "flow.state.state_as_buffers",
    "on the lowered program, before the outputs change: each state input / output pair "
    "becomes a mutable buffer")
SPLIT_OUTPUTS = EdgeStage(
    (SplitMixedRangeOutputs,), "flow.output_parts.split_outputs",
    "before the int8 I/O: an output assembled from parts of different ranges becomes one "
    "output per part, each then with its own int8 parameters")
INT8_IO = EdgeStage(
    (RemoveInputQuantize, RemoveOutputDequantize), "flow.int8_io.quantize_io",
    "last, on the final program: the quantize of each input and the dequantize of each "
    "output removed where the program takes and returns integers")

EDGE_STAGES = (INTEGER_INPUTS, REFRESH_STRIDES, DELEGATION, CORTEX_M_LOWERING,
               PORTABLE_LINEAR, STATE, SPLIT_OUTPUTS, INT8_IO)
"""Every Edge stage, in the order a compile runs them."""


@dataclass(frozen=True)
class Splice:
    """One change to ExecuTorch's Cortex-M pass list: ``ours`` put ``where`` (before, after
    or instead of) the upstream pass named ``anchor``; no ``ours`` with ``instead`` drops
    it."""

    anchor: str
    where: Literal["before", "after", "instead"]
    ours: type | None
    why: str


CORTEX_M_SPLICE = (
    Splice("FoldAndAnnotateQParamsPass", "after", SetLinearBiasesAside,
           "the passes between re-trace the graph, where an int8 linear with its int32 bias "
           "would come out int32"),
    Splice("ActivationFusionPass", "instead", FuseActivations,
           "a fused hardsigmoid keeps its zero point unclamped"),
    Splice("QuantizedClampActivationPass", "instead", ClampQuantizedActivations,
           "a relu, hardtanh or clamp on int8 values is told by its folded parameters, not "
           "by its input's re-traced dtype"),
    Splice("AtenToCortexMPass", "before", RestoreLinearBiases,
           "the biases set aside go back for the kernels to fold in"),
    Splice("ValidateCortexMExplicitLayoutPass", "instead", None,
           "it refuses any convolution or pooling left un-lowered, float ones included; "
           "those the plan leaves to portable kernels run in float between their quantize "
           "/ dequantize, as the quantized reference computes them"),
)


def spliced(upstream, rules=CORTEX_M_SPLICE) -> list[type]:
    """The pass list ``upstream`` with ``rules`` applied; raises ``LookupError`` when an
    anchor is not in it exactly once (ExecuTorch changed its list: the rules need a look)."""
    names = [p.__name__ for p in upstream]
    stale = [r.anchor for r in rules if names.count(r.anchor) != 1]
    if stale:
        raise LookupError(f"ExecuTorch's Cortex-M pass list no longer has exactly one of "
                          f"{', '.join(stale)}: see passes/edge/order.py")
    passes = []
    for p in upstream:
        here = [r for r in rules if r.anchor == p.__name__]
        passes += [r.ours for r in here if r.where == "before"]
        instead = [r.ours for r in here if r.where == "instead"]
        passes += [o for o in instead if o is not None] if instead else [p]
        passes += [r.ours for r in here if r.where == "after"]
    return passes
