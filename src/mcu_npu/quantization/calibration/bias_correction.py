"""Empirical bias correction. Rounding a layer's weights to int8 shifts the mean of its
outputs, per channel, by an amount that does not average out: a depthwise or small-fan-in
convolution sums few products, so a few rounded weights move each channel's mean. That
shift passes through every later layer. After calibration, the calibrated graph runs the
calibration samples twice, in float64: once as the float model, once with each observer
quantizing what it sees as the converted reference will (``whole_model``'s simulation).
Layer by layer in graph order, each corrected layer's bias takes the difference of the two
runs' per-channel output means, so the quantized run's layer outputs have the float
model's means; the layers after it then see the corrected values.

A mean matched layer by layer is not the least error through the nonlinearities after it
(on CREPE's convolutions it costs 1.6 dB), so the corrected biases are kept only where
the whole model's simulated output SQNR on the calibration samples rises by
``whole_model.MIN_GAIN_DB``; otherwise every bias goes back to its calibrated value."""

from __future__ import annotations

import contextlib
import operator
from typing import Callable, ContextManager, Iterator

import torch
from torch.fx import GraphModule, Node

from torchao.quantization.pt2e.observer import ObserverBase

from .whole_model import (MAX_SAMPLES, MIN_GAIN_DB, _as_double, _fake_quantize,
                          observer_params, outputs_sqnr, simulated_sqnr)

aten = torch.ops.aten

_LAYERS = {aten.conv1d.default: 1, aten.conv2d.default: 1, aten.linear.default: -1}
"""Layer op -> the dim of its output channels."""

CORRECTED_KEY = "mcu_npu_bias_correction"
"""Key in the quantized reference's ``meta``: the verdict ``correct`` returns."""


def correctable(prepared: GraphModule) -> list:
    """(layer node, bias parameter name, bias observer node) of the convolutions and linear
    layers of ``prepared`` with a weight and a bias parameter behind observers."""
    found = []
    for node in prepared.graph.nodes:
        if node.op != "call_function" or node.target not in _LAYERS or len(node.args) < 3:
            continue
        weight, bias = _param_of(prepared, node.args[1]), node.args[2]
        if not isinstance(bias, Node) or bias.op != "call_module" \
                or not isinstance(bias.args[0], Node) or bias.args[0].op != "get_attr":
            continue
        if weight is not None:
            found.append((node, bias.args[0].target, bias))
    return found


def _param_of(prepared: GraphModule, arg) -> torch.Tensor | None:
    """The parameter behind ``arg`` (a ``get_attr`` or an observer of one), or None."""
    if isinstance(arg, Node) and arg.op == "call_module" and arg.args:
        arg = arg.args[0]
    if isinstance(arg, Node) and arg.op == "get_attr":
        return operator.attrgetter(arg.target)(prepared)
    return None


class _Recorder(torch.nn.Module):
    """Keeps the per-channel sums of the first ``limit`` values a layer gives (its input),
    passing nothing on: a node of its own beside the layer, used by nothing."""

    def __init__(self, layer: Node, limit: int):
        super().__init__()
        self.layer, self.limit, self.sums, self.float64 = layer, limit, [], True

    def forward(self, x):
        if len(self.sums) < self.limit:
            self.float64 &= x.dtype == torch.float64
            self.sums.append(_channel_sum(self.layer, x.detach()))


_RECORDER = "_mcu_npu_float_mean_recorder"


@contextlib.contextmanager
def float_means_recorded(prepared: GraphModule, limit: int = MAX_SAMPLES) \
        -> Iterator[dict]:
    """Within: the correctable layers of ``prepared`` keep their outputs' per-channel sums
    on the first ``limit`` runs (the calibration's float64 runs, which are the float
    model's; sums, not the outputs, so a large model's activations are not held); yields a
    dict that, on exit, maps each layer node to its per-channel float mean, as ``correct``'s
    own float run would compute it (empty where a run was not in float64). The recording
    nodes are gone on exit."""
    recorders = {}
    means: dict = {}
    for i, (node, _, _) in enumerate(correctable(prepared)):
        name = f"{_RECORDER}_{i}"
        prepared.add_module(name, _Recorder(node, limit))
        with prepared.graph.inserting_after(node):
            recorders[node] = prepared.graph.call_module(name, (node,))
    prepared.recompile()
    try:
        yield means
    finally:
        for node, recorder in recorders.items():
            kept = getattr(prepared, recorder.target)
            if kept.sums and kept.float64:
                means[node] = _mean_of(kept.sums)
            prepared.graph.erase_node(recorder)
            delattr(prepared, recorder.target)
        prepared.recompile()


def correct(prepared: GraphModule, samples: list[tuple], float_outputs: list,
            float64: Callable[[], ContextManager], before_db: float | None = None,
            float_means: dict | None = None) -> dict | None:
    """Correct the layers' biases of calibrated ``prepared`` in place
    (see the module's docstring) from the first ``MAX_SAMPLES`` ``samples``, computing
    inside ``float64()``. The corrected biases are kept only where they raise the simulated
    whole-model SQNR against ``float_outputs`` by ``MIN_GAIN_DB``. ``before_db``: that SQNR
    before correcting where it is known (``whole_model.check`` scored these ranges on these
    samples), else simulated here; after correcting it is read off the correcting run
    itself, whose layers all run with their corrected biases. ``float_means``: the layers'
    float means where the calibration recorded them (``float_means_recorded``), else a
    float run here finds them. Returns the verdict
    (``{"kept", "layers", "before_db", "after_db", "samples"}``), or None with no layer
    to correct."""
    layers = correctable(prepared)
    n = min(len(samples), len(float_outputs), MAX_SAMPLES)
    if not layers or n == 0:
        return None
    samples, float_outputs = samples[:n], float_outputs[:n]
    params = observer_params(prepared)
    originals = {name: operator.attrgetter(name)(prepared).detach().clone()
                 for _, name, _ in layers}
    by_node = {node: name for node, name, _ in layers}
    kept = False
    try:
        with float64(), torch.no_grad():
            before = simulated_sqnr(prepared, params, samples, float_outputs) \
                if before_db is None else before_db
            if not float_means or set(float_means) != set(by_node):
                float_means = {}
                _run(prepared, samples, None, by_node, lambda node, values:
                     float_means.__setitem__(node, _channel_mean(node, values)))

            def shift(node, values):
                bias = operator.attrgetter(by_node[node])(prepared)
                bias.add_((float_means[node] - _channel_mean(node, values)).to(bias.dtype))
                return True  # the layer runs again with its corrected bias

            after = outputs_sqnr(_run(prepared, samples, params, by_node, shift),
                                 float_outputs)
        kept = after >= before + MIN_GAIN_DB
    finally:
        if not kept:
            with torch.no_grad():
                for name, value in originals.items():
                    bias = operator.attrgetter(name)(prepared)
                    bias.copy_(value.to(bias.dtype))
    return {"kept": kept, "layers": len(layers), "before_db": round(before, 2),
            "after_db": round(after, 2), "samples": n}


def _channel_sum(node: Node, value: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Per output channel, the sum of one sample's ``value`` of layer ``node`` in float64,
    and how many values each channel summed."""
    dim = _LAYERS[node.target] % value.dim()
    rows = value.double().transpose(dim, -1).reshape(-1, value.shape[dim])
    return rows.sum(0), rows.shape[0]


def _channel_mean(node: Node, values: list[torch.Tensor]) -> torch.Tensor:
    """Per output channel, the mean of ``values`` (one per sample) of layer ``node``: the
    samples' sums added in order (``float_means_recorded`` adds them as they come)."""
    return _mean_of([_channel_sum(node, v) for v in values])


def _mean_of(sums: list[tuple[torch.Tensor, int]]) -> torch.Tensor:
    total, count = sums[0]
    for s, c in sums[1:]:
        total, count = total + s, count + c
    return total / count


def _run(prepared: GraphModule, samples: list[tuple], params: dict | None, layers: dict,
         visit: Callable[[Node, list], bool]) -> list:
    """Run ``prepared`` on every sample at once, node by node: observers pass what they see
    (``params`` None) or quantize it by ``params``; at each node of ``layers`` ``visit(node,
    its values)`` is called, and a True answer runs that node's bias observer and the node
    again (the bias changed). Returns the graph's outputs, one per sample."""
    last_use = {}
    for node in prepared.graph.nodes:
        for used in node.all_input_nodes:
            last_use[used] = node
    env: dict[Node, list] = {}
    n = len(samples)
    placeholders = iter(range(len(samples[0])))

    def values(arg, i):
        return torch.fx.node.map_arg(arg, lambda a: env[a][i])

    def evaluate(node):
        if node.op == "placeholder":
            k = next(placeholders)
            return [_as_double(s[k]) for s in samples]
        if node.op == "get_attr":  # kept to the end: a corrected bias is read again
            return [operator.attrgetter(node.target)(prepared)] * n
        if node.op == "call_module":
            module = prepared.get_submodule(node.target)
            if isinstance(module, ObserverBase):
                fq = _fake_quantize(params.get(id(module))) if params is not None else None
                return [fq(env[node.args[0]][i]) if fq else env[node.args[0]][i]
                        for i in range(n)]
            return [module(*values(node.args, i), **values(node.kwargs, i)) for i in range(n)]
        return [node.target(*values(node.args, i), **values(node.kwargs, i)) for i in range(n)]

    for node in prepared.graph.nodes:
        if node.op == "output":
            return [values(node.args[0], i) for i in range(n)]
        env[node] = evaluate(node)
        if node in layers and visit(node, env[node]):
            bias_observer = node.args[2]
            env[bias_observer] = evaluate(bias_observer)
            env[node] = evaluate(node)
        for used in node.all_input_nodes:
            if last_use.get(used) is node and used.op != "get_attr":
                del env[used]
