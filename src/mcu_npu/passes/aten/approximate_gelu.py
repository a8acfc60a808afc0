"""ApproximateGELU: ``gelu`` becomes an approximation built of operators every NPU runs, for
an NPU with no GELU (eIQ Neutron).

Before::

    y = gelu(x)                        # nn.GELU(), F.gelu(x), approximate="none" or "tanh"

After (``form="sigmoid"``)::

    y = mul(x, sigmoid(mul(x, 1.702)))

After (``form="tanh"``)::

    c = mul(add(x, mul(mul(mul(x, x), x), 0.044715)), sqrt(2 / pi))
    y = mul(mul(x, 0.5), add(tanh(c), 1))

The sigmoid form is within 0.021 of the exact GELU everywhere, the tanh form within 0.0005
(and exact for ``gelu(x, approximate="tanh")``); the sigmoid form costs three int8 ops, the
tanh form eight. Neither is exact to the erf GELU, so the compile flow applies this pass only
where the whole model's quantized accuracy shows the approximation costs no more than the
numerics contract allows (``flow.approximate``).
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, replace_nodes

aten = torch.ops.aten

FORMS = ("sigmoid", "tanh")
SIGMOID_SLOPE = 1.702
"""The slope of x * sigmoid(a x) closest to GELU (Hendrycks and Gimpel, 2016)."""
_TANH_SCALE = math.sqrt(2.0 / math.pi)
_TANH_CUBIC = 0.044715


def is_gelu(node: Node) -> bool:
    """A ``gelu`` (either ``approximate``) on a floating-point tensor."""
    return node.op == "call_function" and node.target == aten.gelu.default


def _sigmoid_form(gm: GraphModule, node: Node) -> Node:
    emit = Emitter(gm.graph, node)
    x = node.args[0]
    return emit(aten.mul.Tensor, x, emit(aten.sigmoid.default,
                                         emit(aten.mul.Tensor, x, SIGMOID_SLOPE)))


def _tanh_form(gm: GraphModule, node: Node) -> Node:
    emit = Emitter(gm.graph, node)
    x = node.args[0]
    cube = emit(aten.mul.Tensor, emit(aten.mul.Tensor, x, x), x)
    inner = emit(aten.add.Tensor, x, emit(aten.mul.Tensor, cube, _TANH_CUBIC))
    gate = emit(aten.add.Tensor, emit(aten.tanh.default,
                                      emit(aten.mul.Tensor, inner, _TANH_SCALE)), 1.0)
    return emit(aten.mul.Tensor, emit(aten.mul.Tensor, x, 0.5), gate)


class ApproximateGELU(PassBase):
    """Rewrite every ``gelu`` into its ``form`` ("sigmoid" or "tanh")."""

    def __init__(self, form: str = "sigmoid"):
        super().__init__()
        if form not in FORMS:
            raise ValueError(f"unknown GELU approximation {form!r}; expected one of {FORMS}")
        self.form = form

    def call(self, graph_module: GraphModule) -> PassResult:
        rewrite = _sigmoid_form if self.form == "sigmoid" else _tanh_form
        return PassResult(graph_module, replace_nodes(graph_module, is_gelu, rewrite))
