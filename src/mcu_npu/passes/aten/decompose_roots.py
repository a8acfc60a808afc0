"""DecomposeRoots: L2 norms, variances, standard deviations, square roots and divisions by them
as the means, multiplications and reciprocal square roots (RSQRT) NPUs run.

Spellings accepted (``dims``: any reduced axes, ``N``: the number of elements they hold)::

    linalg_vector_norm(x, 2, dims, keepdim)    -> sqrt(sum(x * x, dims, keepdim))
      (torch.norm, x.norm(dim=...), torch.linalg.vector_norm, F.normalize's norm)
    var(x, dims, correction, keepdim)          -> mean(d * d, dims, keepdim) * N / (N - correction)
      (var, var_mean, std, std_mean)              with d = x - mean(x, dims, keepdim=True)
    std(x, ...)                                -> sqrt(var(x, ...))
    pow(x, 2)                                  -> x * x
    pow(x, 0.5)                                -> sqrt(x)
    x / sqrt(s)                                -> x * rsqrt(s)
    x / clamp(sqrt(s), min=eps)                -> x * rsqrt(clamp(s, min=eps * eps))
    x / d, d > 0 by construction               -> x * rsqrt(d * d)
      (d: computed from a square root and positive: a clamp to a positive minimum, or a sum
      of a non-negative value and a positive constant, e.g. GRN's g.mean(...) + eps; an
      expand of the divisor is dropped)
    sqrt(v)                                    -> v * rsqrt(v), v clamped to TINY unless it
                                                  is positive by construction
    sum(x, dims, keepdim)                      -> mean(x, dims, keepdim) * N
    addcmul(b, w, t, value=v)                  -> b + (w * t) * v    (timm's GRN ends so)

Neither NPU compiler takes SQRT, and Vela takes DIV on the U85 only (LiteRT has no int8 DIV
to check it with); RSQRT, MUL and MEAN run on every NPU. Statistics pooling (mean and standard
deviation over time), global response normalisation and L2 normalisation thus run wholly on
the NPU. A division by a run-time value that is not provably positive, or not computed from
a root, is left as it is (it runs on the CPU, with the reason). Exact in float, except that
the ``sqrt`` of a value ``v`` below ``TINY`` that is not positive by construction is
``v / sqrt(TINY)``, below ``sqrt(TINY)`` (1e-6) as the true root is.

In int8 the reciprocal square root is a table over its input's range with its own output
parameters: its precision is that of an int8 ``1 / sqrt(v)`` over the range calibration sees.
"""

from __future__ import annotations

import math
import numbers
import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from mcu_npu.graph.schema import bind
from mcu_npu.passes.aten._recurrent import Emitter, finish, replace_outputs

aten = torch.ops.aten

TINY = 1e-12
"""The floor of a ``sqrt``'s input that is not positive by construction: ``0 * rsqrt(0)``
would be NaN."""

_VARIANCES = {aten.var.dim: "var", aten.var.correction: "var", aten.std.dim: "std",
              aten.std.correction: "std", aten.var_mean.dim: "var_mean",
              aten.var_mean.correction: "var_mean", aten.std_mean.dim: "std_mean",
              aten.std_mean.correction: "std_mean"}
_PASS_SIGN = (aten.mean.dim, aten.sum.dim_IntList, aten.amax.default, aten.view.default,
              aten.reshape.default, aten.unsqueeze.default, aten.squeeze.dim,
              aten.squeeze.dims, aten.expand.default, aten.expand_as.default,
              aten.clone.default, aten.permute.default, aten.transpose.int)
_NONNEGATIVE = (aten.sqrt.default, aten.rsqrt.default, aten.abs.default, aten.relu.default,
                aten.exp.default, aten.sigmoid.default, aten.linalg_vector_norm.default)
_EXPANDS = (aten.expand.default, aten.expand_as.default)


def _call(node, *targets) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


def _shape(node: Node) -> tuple:
    return tuple(node.meta["val"].shape)


def _floating(node) -> bool:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return isinstance(val, torch.Tensor) and val.dtype.is_floating_point


def _clamp_min(node: Node) -> float | None:
    """The lower bound of a clamp with no upper bound, else None."""
    if _call(node, aten.clamp_min.default):
        return float(node.args[1])
    if _call(node, aten.clamp.default):
        a = bind(node)
        if a.max is None and a.min is not None:
            return float(a.min)
    return None


def _nonnegative(node) -> bool:
    """Whether ``node`` (a graph value or a number) is >= 0 by construction."""
    if isinstance(node, numbers.Number):
        return node >= 0
    if not isinstance(node, Node) or node.op != "call_function":
        return False
    if node.target in _NONNEGATIVE or node.target in _VARIANCES or _positive(node):
        return True
    if node.target == aten.mul.Tensor and node.args[0] is node.args[1]:
        return True
    if node.target == aten.pow.Tensor_Scalar and node.args[1] % 2 == 0:
        return True
    if node.target in _PASS_SIGN:
        return _nonnegative(node.args[0])
    if node.target in (aten.add.Tensor, aten.mul.Tensor):
        return not node.kwargs and all(_nonnegative(a) for a in node.args[:2])
    bound = _clamp_min(node)
    return bound is not None and bound >= 0


def _positive(node) -> bool:
    """Whether ``node`` (a graph value or a number) is > 0 by construction."""
    if isinstance(node, numbers.Number):
        return node > 0
    if not isinstance(node, Node) or node.op != "call_function":
        return False
    if node.target in (aten.exp.default, aten.sigmoid.default):
        return True
    bound = _clamp_min(node)
    if bound is not None:
        return bound > 0
    if node.target in _PASS_SIGN or node.target in (aten.sqrt.default, aten.rsqrt.default):
        return _positive(node.args[0])
    a, b = (node.args + (None, None))[:2]
    if node.target == aten.add.Tensor and (len(node.args) == 2 and not node.kwargs):
        return (_positive(a) and _nonnegative(b)) or (_nonnegative(a) and _positive(b))
    if node.target == aten.mul.Tensor:
        return _positive(a) and _positive(b)
    return False


def _dims(dims, rank: int) -> list[int]:
    return sorted({d % rank for d in dims}) if dims else list(range(rank))


def _count(x: Node, dims: list[int]) -> int:
    return math.prod(_shape(x)[d] for d in dims)


def _correction(node: Node) -> float:
    """The variance's correction (Bessel's 1, or 0) of a var / std family node."""
    a = bind(node)
    if getattr(a, "unbiased", None) is not None:
        return 1.0 if a.unbiased else 0.0
    return 1.0 if a.correction is None else float(a.correction)


def _variance(emit: Emitter, x: Node, node: Node) -> tuple[Node, Node]:
    """(variance, mean) of ``x`` as ``node`` (a var / std family node) reduces it."""
    a = bind(node)
    dims = _dims(a.dim, len(_shape(x)))
    correction = _correction(node)
    mean = emit(aten.mean.dim, x, dims, True)
    d = emit(aten.sub.Tensor, x, mean)
    var = emit(aten.mean.dim, emit(aten.mul.Tensor, d, d), dims, bool(a.keepdim))
    n = _count(x, dims)
    if correction:
        var = emit(aten.mul.Tensor, var, n / (n - correction))
    if not a.keepdim:
        mean = emit(aten.squeeze.dims, mean, dims)
    return var, mean


def _expand(gm: GraphModule, node: Node) -> bool:
    """First sweep: norms, variances and powers as sqrt, sum, mean and mul."""
    emit, t = Emitter(gm.graph, node), node.target
    if t == aten.linalg_vector_norm.default:
        a = bind(node)
        if a.ord != 2 or a.dtype is not None:
            return False
        x = a.self
        dims = _dims(a.dim, len(_shape(x)))
        out = emit(aten.sqrt.default, emit(aten.sum.dim_IntList, emit(aten.mul.Tensor, x, x),
                                           dims, bool(a.keepdim)))
    elif t == aten.pow.Tensor_Scalar and node.args[1] in (2, 0.5):
        x = node.args[0]
        out = emit(aten.mul.Tensor, x, x) if node.args[1] == 2 else emit(aten.sqrt.default, x)
    elif t == aten.addcmul.default:
        a = bind(node)
        out = emit(aten.mul.Tensor, a.tensor1, a.tensor2)
        if a.value != 1:
            out = emit(aten.mul.Tensor, out, a.value)
        out = emit(aten.add.Tensor, a.self, out)
    elif t in _VARIANCES:
        x = node.args[0]
        if _count(x, _dims(bind(node).dim, len(_shape(x)))) <= _correction(node):
            return False  # no sample to correct with: torch gives NaN or inf, left to it
        kind = _VARIANCES[t]
        var, mean = _variance(emit, node.args[0], node)
        if kind.startswith("std"):
            var = emit(aten.sqrt.default, var)
        if kind.endswith("_mean"):
            replace_outputs(gm, node, [var, mean])
            return True
        out = var
    else:
        return False
    node.replace_all_uses_with(out)
    gm.graph.erase_node(node)
    return True


def _reciprocal(emit: Emitter, d: Node) -> Node | None:
    """``1 / d`` as an rsqrt, or None when ``d`` is not a root or provably positive."""
    bound = _clamp_min(d)
    inner = d.args[0] if bound is not None else None
    if _call(d, aten.sqrt.default):
        return emit(aten.rsqrt.default, d.args[0])
    if bound is not None and bound > 0 and _call(inner, aten.sqrt.default):
        return emit(aten.rsqrt.default, emit(aten.clamp.default, inner.args[0], bound * bound))
    if _positive(d) and _rooted(d):
        return emit(aten.rsqrt.default, emit(aten.mul.Tensor, d, d))
    return None


def _rooted(node) -> bool:
    """Whether ``node`` is computed from a square root through sign-keeping ops, sums,
    products and clamps (GRN's ``g.mean(...) + eps``): a normalisation's divisor, whose range
    calibration sees is narrow. Other positive divisors (``exp(x).sum()``) are left alone."""
    if not isinstance(node, Node) or node.op != "call_function":
        return False
    if node.target == aten.sqrt.default:
        return True
    if node.target in _PASS_SIGN or _clamp_min(node) is not None or \
            node.target in (aten.add.Tensor, aten.mul.Tensor):
        return any(_rooted(a) for a in node.args[:2] if isinstance(a, Node))
    return False


def _divide(gm: GraphModule, node: Node) -> bool:
    """Second sweep: a division by a run-time root or positive value."""
    if not _call(node, aten.div.Tensor) or node.kwargs or len(node.args) != 2:
        return False
    x, d = node.args
    if not (_floating(x) and _floating(d)):
        return False
    while _call(d, *_EXPANDS):
        d = d.args[0]
    if torch.broadcast_shapes(_shape(x), _shape(d)) != _shape(node):
        return False
    emit = Emitter(gm.graph, node)
    r = _reciprocal(emit, d)
    if r is None:
        return False
    divisor = node.args[1]
    node.replace_all_uses_with(emit(aten.mul.Tensor, x, r))
    gm.graph.erase_node(node)
    _erase_dead(gm, divisor)
    return True


def _root(gm: GraphModule, node: Node) -> bool:
    """Third sweep: a square root as ``v * rsqrt(v)``; a sum as a mean times its count."""
    emit = Emitter(gm.graph, node)
    if _call(node, aten.sqrt.default) and _floating(node):
        v = node.args[0]
        guarded = v if _positive(v) else emit(aten.clamp.default, v, TINY)
        out = emit(aten.mul.Tensor, v, emit(aten.rsqrt.default, guarded))
    elif _call(node, aten.sum.dim_IntList) and _floating(node) and \
            bind(node).dtype is None:
        a = bind(node)
        dims = _dims(a.dim, len(_shape(a.self)))
        mean = emit(aten.mean.dim, a.self, dims, bool(a.keepdim))
        out = emit(aten.mul.Tensor, mean, float(_count(a.self, dims)))
    else:
        return False
    node.replace_all_uses_with(out)
    gm.graph.erase_node(node)
    return True


def _erase_dead(gm: GraphModule, node: Node) -> None:
    """Erase ``node`` and then its inputs while nothing reads them (a replaced divisor's
    expand, clamp and sqrt)."""
    work = [node]
    while work:
        n = work.pop()
        if isinstance(n, Node) and n.op == "call_function" and not n.users:
            work.extend(a for a in n.args if isinstance(a, Node))
            gm.graph.erase_node(n)


class DecomposeRoots(PassBase):
    """Rewrite norms, variances, square roots and divisions by them (see the module
    docstring)."""

    def call(self, graph_module: GraphModule) -> PassResult:
        changed = False
        for sweep in (_expand, _divide, _root):
            for node in list(graph_module.graph.nodes):
                if node.op == "call_function" and node.target is not operator.getitem:
                    changed |= sweep(graph_module, node)
        if changed:
            finish(graph_module)
        return PassResult(graph_module, changed)
