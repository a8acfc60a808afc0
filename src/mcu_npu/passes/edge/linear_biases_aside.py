"""SetLinearBiasesAside / RestoreLinearBiases: a quantized linear layer's int32 bias is out of
its call while ExecuTorch's Cortex-M layout passes re-trace the graph.

Before (after ``FoldAndAnnotateQParamsPass``, which leaves the integer tensors)::

    y = linear(x_int8, w_int8, b_int32)          # re-traced on fake tensors: int32
    o = bmm(softmax_int8, view(y))               # int8 x int32: the re-trace fails

While the layout passes run::

    y = linear(x_int8, w_int8)                   # int8, as the Cortex-M kernel's output
    meta["mcu_npu_linear_bias"] = "b_int32"      # the bias placeholder's name

Each of those passes re-traces the graph on fake tensors, where int8 inputs with an int32
bias give an int32 result. Two things went wrong with it:

* an activation read by more than the linear (``relu(y) + y``) was taken for an int32 one,
  so ``QuantizedClampActivationPass`` left ``relu`` / ``clamp`` with float bounds on the
  int8 values: a program 24 dB off its reference (16.9 against 40.6 dB; only the
  report's accuracy warning told);
* where a linear's output meets another int8 tensor in an op that takes one dtype
  (attention's second batched matmul, whose other operand is the softmax), the re-trace
  raised and the whole CPU side fell back to float kernels.

Without its bias the linear re-traces as int8, which is what ``cortex_m::quantized_linear``
gives; the pass re-traces the graph once itself, so every dtype after it is right.
The bias goes back just before ``AtenToCortexMPass``, which folds it into the kernel; its
quantization parameters stay in the node's ``input_qparams`` throughout. The bias is kept
by name because every re-trace makes new nodes (placeholders keep their names).
"""

from __future__ import annotations

from executorch.exir.pass_base import ExportPass
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from ...upstream.private import exir_ops
from mcu_npu.graph.schema import bind

LINEAR = exir_ops.edge.aten.linear.default
KEY = "mcu_npu_linear_bias"
"""Key in a linear node's ``meta``: the name of the bias placeholder set aside."""


def _quantized(node: Node) -> bool:
    return bool(node.meta.get("input_qparams")) and bool(node.meta.get("output_qparams"))


class SetLinearBiasesAside(ExportPass):
    """Take the bias placeholder out of each quantized linear (right after the folding), and
    re-trace: the passes after it read the dtypes the fake tensors give."""

    def call(self, graph_module: GraphModule) -> PassResult:
        modified = False
        for node in graph_module.graph.nodes:
            if node.op != "call_function" or node.target != LINEAR or not _quantized(node):
                continue
            a = bind(node)
            if not isinstance(a.bias, Node) or a.bias.op != "placeholder":
                continue
            node.meta[KEY] = a.bias.name
            node.args, node.kwargs = (a.input, a.weight), {}
            modified = True
        if not modified:
            return PassResult(graph_module, False)
        graph_module.recompile()
        return super().call(graph_module)


class RestoreLinearBiases(PassBase):
    """Put each set-aside bias back in its linear (just before ``AtenToCortexMPass``)."""

    def call(self, graph_module: GraphModule) -> PassResult:
        placeholders = {n.name: n for n in graph_module.graph.nodes if n.op == "placeholder"}
        modified = False
        for node in graph_module.graph.nodes:
            name = node.meta.pop(KEY, None) if node.op == "call_function" else None
            if name is not None:
                node.args = (*node.args[:2], placeholders[name])
                modified = True
            elif node.op == "call_function" and node.target == LINEAR and \
                    len(node.args) < 3 and 2 in (node.meta.get("input_qparams") or {}):
                raise RuntimeError(f"the bias of linear layer {node.name!r} was set aside "
                                   "and lost by a pass in between")
        if modified:
            graph_module.recompile()
        return PassResult(graph_module, modified)
