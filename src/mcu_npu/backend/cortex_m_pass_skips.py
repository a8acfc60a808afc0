"""The Cortex-M lowering passes a graph needs: each pass of ExecuTorch's explicit-layout
pipeline that finds nothing to rewrite is left out.

``CortexMPassManager.transform`` runs every pass through ``_transform``; most are
``ExportPass`` subclasses, and several of them re-trace the whole graph on fake tensors even
where they match nothing (``RemoveGetItemPass``, ``ReplaceScalarWithTensorArgPass``,
``ReplaceQuantNodesPass``), the others still validate the program twice. A pass is skipped here
when no node of the graph, as it is just before that pass, is one the pass matches: the rows of
``_MATCHES`` state that condition, read from the pass's source (executorch 1.5.1). A pass
without a row (``FoldAndAnnotateQParamsPass``, which folds every quantize / dequantize, and
``AtenToCortexMPass``, whose rewrites cover most of ATen) always runs. The last of them
re-traces, so the program still leaves the pipeline re-traced once on fake tensors.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import torch
from torch.fx import GraphModule, Node


def _calls(targets) -> Callable[[Node], bool]:
    targets = frozenset(targets)
    return lambda node: node.target in targets


def _unnamed_or(names) -> Callable[[Node], bool]:
    """``RemoveGetItemPass`` compares ``node.target.__name__`` of every call; a target without
    one makes it fail, which skipping must not hide."""
    return lambda node: getattr(node.target, "__name__", None) in names or \
        not hasattr(node.target, "__name__")


def _maybe_conv1d(node: Node) -> bool:
    """``ConvertConv1dToConv2dPass`` rewrites a convolution with a one-element stride or a 3-D
    weight; every other convolution (a 2-D stride and a known 4-D weight) it leaves alone."""
    from ..upstream.private import exir_ops

    if node.target != exir_ops.edge.aten.convolution.default:
        return False
    args = node.args
    weight = args[1].meta.get("val") if len(args) > 1 and isinstance(args[1], Node) else None
    two_d = len(args) == 9 and isinstance(args[3], (list, tuple)) and len(args[3]) == 2 and \
        isinstance(weight, torch.Tensor) and weight.dim() == 4
    return not two_d


@functools.cache
def _matches() -> dict[type, Callable[[Node], bool]]:
    """Pass class -> whether the pass may rewrite a node: the targets each one looks for,
    taken from the pass itself where it names them."""
    from executorch.backends.cortex_m.passes import explicit_layout_pass as layout
    from executorch.backends.cortex_m.passes.activation_fusion_pass import ActivationFusionPass
    from executorch.backends.cortex_m.passes.decompose_hardswish_pass import (
        DecomposeHardswishPass,
    )
    from executorch.backends.cortex_m.passes.quantized_clamp_activation_pass import (
        QuantizedClampActivationPass,
    )
    from executorch.backends.cortex_m.passes.replace_quant_nodes_pass import (
        ReplaceQuantNodesPass,
    )
    from executorch.backends.transforms.channels_last_layout import PERMUTE_COPY_TARGETS
    from executorch.backends.transforms.convert_conv1d_to_conv2d_pass import (
        ConvertConv1dToConv2dPass,
    )
    from executorch.backends.transforms.remove_getitem_op import RemoveGetItemPass
    from executorch.backends.transforms.remove_permutes_around_elementwise_ops import (
        RemovePermutesAroundElementwiseOps,
    )
    from executorch.backends.transforms.replace_scalar_with_tensor import (
        ReplaceScalarWithTensorArgPass,
    )
    from executorch.backends.transforms.replace_squeeze_unsqueeze_with_view import (
        ReplaceSqueezeAndUnsqueezeWithViewPass,
    )
    from ..upstream.private import exir_ops

    from ..passes.edge import linear_biases_aside as biases
    from ..passes.edge.clamp_quantized_activations import ClampQuantizedActivations
    from ..passes.edge.fuse_activations import FuseActivations

    quant = exir_ops.edge.quantized_decomposed
    aten_quant = torch.ops.quantized_decomposed
    return {
        # max_pool2d_with_indices + getitem -> max_pool2d; max.dim + getitem -> amax
        RemoveGetItemPass: _unnamed_or({"aten.max_pool2d_with_indices.default",
                                        "aten.max.dim"}),
        # add/sub/mul/div .Scalar (Edge or ATen) -> .Tensor with a full() operand
        ReplaceScalarWithTensorArgPass: _calls(ReplaceScalarWithTensorArgPass.default_ops),
        # relu / hardtanh / hardsigmoid / clamp after a conv, linear, add, sub or max pool
        ActivationFusionPass: _calls(ActivationFusionPass.TARGETS),
        FuseActivations: _calls(FuseActivations.TARGETS),
        # relu(_) / hardtanh(_) / clamp on int8 -> clamp with quantized bounds
        QuantizedClampActivationPass: _calls(QuantizedClampActivationPass.TARGETS),
        ClampQuantizedActivations: _calls(ClampQuantizedActivations.TARGETS),
        DecomposeHardswishPass: _calls(DecomposeHardswishPass.TARGETS),
        ConvertConv1dToConv2dPass: _maybe_conv1d,
        # convolution / avg_pool2d / max_pool2d -> channels_last variants between permutes
        layout.CortexMReplaceOpsWithChannelsLastVariants:
            _calls(layout._EXPLICIT_LAYOUT_OP_MAP),
        ReplaceSqueezeAndUnsqueezeWithViewPass:
            _calls(ReplaceSqueezeAndUnsqueezeWithViewPass.targets.fget(None)),
        # chains of view_copy and permute_copy (ATen or channels_last)
        layout.CortexMCanonicalizeViewCopyPermutePass:
            _calls({exir_ops.edge.aten.view_copy.default, *PERMUTE_COPY_TARGETS}),
        # subgraphs that start at a permute_copy
        RemovePermutesAroundElementwiseOps: _calls(PERMUTE_COPY_TARGETS),
        # Edge (de)quantize_per_tensor -> cortex_m ones; the ATen ones make it fail
        # ours: a linear layer's bias out while the passes between re-trace, then back
        biases.SetLinearBiasesAside: _calls({biases.LINEAR}),
        biases.RestoreLinearBiases: lambda node: biases.KEY in node.meta,
        ReplaceQuantNodesPass: _calls({quant.quantize_per_tensor.default,
                                       quant.dequantize_per_tensor.default,
                                       aten_quant.quantize_per_tensor.default,
                                       aten_quant.dequantize_per_tensor.default}),
    }


def may_change(pass_cls: type, graph_module: GraphModule) -> bool:
    """Whether ``pass_cls`` can rewrite ``graph_module`` or one of its nested graphs: true
    for a pass without a known match condition."""
    match = _matches().get(pass_cls)
    if match is None:
        return True
    return any(node.op == "call_function" and match(node)
               for module in graph_module.modules() if isinstance(module, GraphModule)
               for node in module.graph.nodes)


def run_passes(exported_program, passes: list, target_config):
    """``CortexMPassManager.transform`` over ``passes`` in order, without the passes that
    cannot change the program as it is when their turn comes (``may_change``). Each pass is
    built as the manager builds it (``exported_program`` / ``target_config`` where its
    constructor takes them), and new constant tensors are lifted at the end. The program
    is validated once, after the passes (``upstream.patches.validation_deferred``), not
    before and after each."""
    from ..upstream.private import lift_constant_tensor_pass, transform_program

    from ..upstream.patches import validation_deferred

    with validation_deferred():  # the program that leaves the passes is validated below
        for pass_cls in passes:
            if not may_change(pass_cls, exported_program.graph_module):
                continue
            parameters = inspect.signature(pass_cls).parameters
            kwargs: dict[str, Any] = {}
            if "exported_program" in parameters:
                kwargs["exported_program"] = exported_program
            if "target_config" in parameters:
                kwargs["target_config"] = target_config
            exported_program = transform_program(exported_program, pass_cls(**kwargs))
    exported_program.validate()
    return lift_constant_tensor_pass(exported_program)
