"""ConvertDivToMul: a division by a constant becomes a multiplication by its reciprocal.

Before::

    y = div(x, 2)                  # (x + x_dist) / 2: a distilled head's average
    z = div(x, scale)              # scale: a constant tensor (a get_attr)

After::

    y = mul(x, 0.5)
    z = mul(x, _mcu_npu_reciprocal_div)

Neither NPU compiler takes a division, and the int8 MUL every NPU runs takes a constant
operand; a division by a run-time value is left as it is (it runs on the CPU, with the
reason). Exact in float up to the reciprocal's rounding (one unit in the last place).
"""

from __future__ import annotations

import numbers

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.passes.aten._recurrent import Emitter, constant_attr, replace_nodes

aten = torch.ops.aten
_DIVS = (aten.div.Tensor, aten.div.Scalar)


def _divisor(gm: GraphModule, node: Node):
    """The constant divisor of a plain division (a number, or the tensor of a ``get_attr``)
    when it has no zero; else None."""
    if node.op != "call_function" or node.target not in _DIVS or len(node.args) != 2 or \
            node.kwargs.get("rounding_mode") is not None:
        return None
    x, d = node.args
    val = x.meta.get("val") if isinstance(x, Node) else None
    if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point:
        return None
    if isinstance(d, numbers.Number) and not isinstance(d, bool):
        return float(d) if d != 0 else None
    if isinstance(d, Node) and d.op == "get_attr":
        value = gm.get_parameter(d.target) if d.target in dict(gm.named_parameters()) \
            else getattr(gm, d.target, None)
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point and \
                bool((value != 0).all()):
            return value.detach()
    return None


class ConvertDivToMul(PassBase):
    """Rewrite every division by a constant into a multiplication by its reciprocal."""

    def call(self, graph_module: GraphModule) -> PassResult:
        def rewrite(gm: GraphModule, node: Node) -> Node:
            d = _divisor(gm, node)
            emit = Emitter(gm.graph, node)
            if isinstance(d, float):
                return emit(aten.mul.Tensor, node.args[0], 1.0 / d)
            reciprocal = constant_attr(gm, node, f"reciprocal_{node.name}", 1.0 / d)
            return emit(aten.mul.Tensor, node.args[0], reciprocal)

        changed = replace_nodes(graph_module, lambda n: _divisor(graph_module, n) is not None,
                                rewrite)
        return PassResult(graph_module, changed)
