"""Per-layer error: each compute op's host-run tensor and quantized-reference tensor against
the float model.

Three runs of every sample give each compute op of the report three values (``layer_rows``;
``flow.measure.layer_errors`` gathers what they run on):

- float: the model as given, exported and rewritten exactly as it was for quantization
  (so its nodes carry the ids the quantizer gave them, ``graph.ids``), batch norms folded
  into their convolutions as PT2E does, run in float64;
- reference: the converted PT2E reference run exactly (``quantization.exact``); an op's value
  is its output as the next op reads it, i.e. after its quantize;
- host: the ``.pte`` run by the host runtime. Inside an NPU partition the value is the
  emulated TFLite graph's tensor of that node (the converter names each tensor after the
  Edge node it computes). Outside partitions the ``.pte`` names no node (its kernel calls
  read and write numbered values): a CPU op computing a program output gets that output,
  any other CPU op's row shows the reference there and says so (``source``).

An op whose output is not quantized by itself (a convolution with the ReLU after it fused
into one NPU operator) is measured where its result is first quantized: ``measured_at``
names that op, and the row holds the fused group's error.

The rows are sorted by ``loss_db``: how many dB of SQNR against float the host loses at
this op, i.e. the lowest host SQNR among the compute ops feeding it (for an op fed by the
model's inputs, the SQNR of those inputs as quantized) minus its own. Error that arrives
from earlier layers does not count against an op; the op where accuracy is lost comes
first, whether the loss is plain quantization or a host run that departs from the
reference (then ``gap_db`` and ``max_error_steps`` are large as well).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.fx import GraphModule, Node

from ..device.delegate_io import inverse
from ..graph.ids import node_id
from ..program_state import leaves
from .metrics import sqnr_db
from ..quantization.exact import _DEQUANTIZE, _QUANTIZE, exact_runner

SOURCE_NPU = "npu"
"""The host value is the emulated NPU graph's tensor of the node."""
SOURCE_NPU_MOVED = "npu, moved"
"""A data-movement op (permute, view, squeeze, clone ...) inside an NPU partition, which the
converter folds into its neighbours' layouts, so the NPU graph has no tensor of it: the
host value is its input's NPU tensor moved the same way (the same numbers)."""
SOURCE_OUTPUT = "output"
"""The op's result is a program output: the host value is the ``.pte``'s output."""
SOURCE_REFERENCE = "reference"
"""No host value is tied to the node (an op on the CPU, or one the NPU graph keeps no
tensor of): ``sqnr_db`` is the quantized reference's there (the numerics contract has the
host compute the same), and ``gap_db`` and ``max_error_steps`` are None."""


def layer_rows(ops, reference: GraphModule, float_graph: GraphModule, edge_ids: dict[str, str],
               run, samples: list[tuple]) -> list[dict]:
    """One row per compute op of ``ops`` (the report's ``OpPlacement`` rows) on ``samples``
    (tuples of float model inputs), sorted by ``loss_db``, largest first (module
    docstring). ``reference``: the quantized reference; ``float_graph``: the float model as
    it was quantized; ``edge_ids``: Edge node name -> node id; ``run``: a sample -> the
    host-run program's float outputs. Row keys: ``node``, ``op``, ``runs_on``, ``source``
    (where the host value came from: ``SOURCE_NPU``, ``SOURCE_NPU_MOVED``,
    ``SOURCE_OUTPUT`` or ``SOURCE_REFERENCE``), ``measured_at``, ``sqnr_db`` (host vs
    float), ``reference_sqnr_db`` (reference vs float), ``gap_db`` (reference minus host),
    ``max_error_steps`` (largest |host - reference| in the reference's quantization steps
    of that tensor), ``loss_db``."""
    edge_names = _edge_names(edge_ids)
    by_id = _nodes_by_id(reference)
    points = {o.node: _measure_point(by_id.get(edge_ids.get(o.node))) for o in ops}
    placeholders = [n for n in reference.graph.nodes if n.op == "placeholder"]
    ref_outputs = _output_producers(reference)
    values = {o.node: _Values() for o in ops}
    quantized_inputs = {o.node: [] for o in ops}
    run_float, run_reference = exact_runner(float_graph), exact_runner(reference)
    for sample in samples:
        floats = _capture(float_graph, sample, run_float)
        refs = _capture(reference, sample, run_reference)
        host, outputs = _host_run(run, sample, ref_outputs)
        host_values: dict[Node, torch.Tensor] = {}  # reference node -> its host value
        inputs = dict(zip(placeholders, sample))
        for o in ops:
            point = points[o.node]
            if point is None:
                continue
            f, r = floats.get(node_id(point.node)), refs.get(point.node)
            if not isinstance(f, torch.Tensor) or not isinstance(r, torch.Tensor):
                continue
            r = point.dequantized(r, refs)
            h, source = None, SOURCE_REFERENCE
            if o.kernel == "npu":
                h, source = _host_value(host.get(edge_names.get(node_id(point.node))), r), \
                    SOURCE_NPU
                if h is None:
                    h, source = _moved(point, host_values), SOURCE_NPU_MOVED
            if h is None and point.node in outputs and outputs[point.node].numel() == r.numel():
                h, source = outputs[point.node].double().reshape(r.shape), SOURCE_OUTPUT
            if h is not None:
                host_values[point.node] = h
            values[o.node].add(f, r, h, point.step(refs), source)
            quantized_inputs[o.node].append(_input_pairs(point.first, refs, inputs))
    rows = [_row(o, points[o.node], values[o.node], edge_names) for o in ops]
    _add_losses(rows, ops, quantized_inputs)
    return sorted(rows, key=_order)


def stored_size(ops) -> int:
    """An upper bound of the bytes the rows of ``ops`` (``OpPlacement``) take in the
    report's compact JSON: room to reserve in the ``.pte`` before the program exists."""
    return sum(2 * len(o.node) + len(o.op) + len(o.placement) + _ROW_FIXED for o in ops)


_ROW_FIXED = 260  # keys, the source, seven numbers (-123.45, inf, null) and punctuation


# -- the three runs ---------------------------------------------------------------------------
def _capture(gm: GraphModule, sample: tuple, runner) -> dict:
    """Every node's output of ``gm`` on ``sample``, run in float64 by ``runner``
    (``quantization.exact.exact_runner(gm)``); for a float graph keyed by node id too."""
    outputs: dict[Node, object] = {}
    with torch.no_grad():
        runner(*sample, keep=outputs)
    out = dict(outputs)
    for n, v in outputs.items():
        ident = node_id(n)
        if ident is not None and n.op == "call_function":
            out[ident] = v  # the last node carrying the id: the op's result
    return out


def _edge_names(edge_ids: dict[str, str]) -> dict[str, str]:
    """Node id -> the last Edge node made from it (the one holding its result)."""
    return {ident: name for name, ident in edge_ids.items()}


def _host_run(run, sample: tuple, producers: list) -> tuple[dict, dict]:
    """One host run of the ``.pte`` on ``sample``: the NPU graphs' tensors by name, and the
    program's outputs (dequantized) by the reference node computing each (``producers``)."""
    from ..runtime.npu_emulator import recording_tensors

    with recording_tensors() as calls:
        outputs = run(sample)
    tensors = {}
    for call in calls:
        tensors.update(call)
    by_node = {}
    if len(outputs) == len(producers):
        by_node = {n: out for n, out in zip(producers, outputs)
                   if n is not None and isinstance(out, torch.Tensor)}
    return tensors, by_node


def _output_producers(gm: GraphModule) -> list:
    """Per model output, the reference's compute node whose value it is (None if none)."""
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    producers = []
    for arg in leaves(out.args[0]):
        while isinstance(arg, Node) and arg.target in _QUANTIZE | _DEQUANTIZE:
            arg = arg.args[0]
        producers.append(arg if isinstance(arg, Node) and _is_compute(arg) else None)
    return producers


# -- where an op is measured -----------------------------------------------------------------
@dataclass(frozen=True)
class _Point:
    """Where an op's value is read in the reference: ``node`` (the op itself or the op whose
    output is first quantized after it) and the quantize node there, if any."""

    first: Node
    node: Node
    quantize: Node | None

    def _params(self, refs: dict) -> tuple[float, int] | None:
        if self.quantize is None or self.quantize.target not in _PER_TENSOR_Q:
            return None
        scale, zero = (refs[a] if isinstance(a, Node) else a for a in self.quantize.args[1:3])
        scale = float(torch.as_tensor(scale, dtype=torch.float32))  # as the kernels see it
        return scale, int(torch.as_tensor(zero))

    def step(self, refs: dict) -> float | None:
        """The quantization step of the op's output (None: not quantized per tensor)."""
        params = self._params(refs)
        return None if params is None else params[0]

    def dequantized(self, value: torch.Tensor, refs: dict) -> torch.Tensor:
        """The op's value as the next op reads it (dequantized after its quantize)."""
        params = self._params(refs)
        if params is None:
            return value
        scale, zero = params
        return (refs[self.quantize].to(torch.int64) - zero).double() * scale


_PER_TENSOR_Q = {t for t in _QUANTIZE if "per_tensor" in str(t)}


def _is_compute(n: Node) -> bool:
    return n.op == "call_function" and n.target not in _QUANTIZE | _DEQUANTIZE


def _nodes_by_id(gm: GraphModule) -> dict[str, Node]:
    """Node id -> the reference's last node carrying it (the one holding the op's result)."""
    return {node_id(n): n for n in gm.graph.nodes
            if n.op == "call_function" and node_id(n) is not None}


def _measure_point(first: Node | None) -> _Point | None:
    if first is None:
        return None
    node = first
    while True:
        quantizes = [u for u in node.users if u.target in _QUANTIZE]
        if quantizes:
            return _Point(first, node, quantizes[0])
        users = list(node.users)
        if len(users) != 1 or not _is_compute(users[0]) or node_id(users[0]) is None:
            return _Point(first, node, None)
        node = users[0]  # not quantized on its own: fused with the op after it


def _host_value(tensor, reference: torch.Tensor):
    """The host tensor dequantized and in PyTorch layout; None when it cannot be matched."""
    if tensor is None or tensor.scale is None:
        return None
    data = (tensor.data.astype(np.float64) - tensor.zero_point) * np.float32(tensor.scale)
    shape = tuple(reference.shape)
    best, best_err = None, math.inf
    for view in _without_unit_axes(data, len(shape)):  # a conv1d's NHWC [N, 1, L, C]
        for perm in _layouts(len(shape)):
            if tuple(shape[p] for p in perm) != tuple(view.shape):
                continue
            candidate = torch.from_numpy(np.ascontiguousarray(np.transpose(view, inverse(perm))))
            err = float((candidate - reference).abs().max()) if candidate.numel() else 0.0
            if err < best_err:  # shapes alike in two layouts (C == H == W): the closer one
                best, best_err = candidate, err
    if best is None and data.size == reference.numel() and data.ndim != len(shape):
        best = torch.from_numpy(data.reshape(shape))
    return best


def _without_unit_axes(data: np.ndarray, rank: int) -> list[np.ndarray]:
    """``data`` itself when it has ``rank`` axes; with more, each way of dropping size-1
    axes down to ``rank`` (the converter lays a 1-D convolution out as 2-D)."""
    extra = data.ndim - rank
    if extra <= 0:
        return [data] if extra == 0 else []
    units = [i for i, d in enumerate(data.shape) if d == 1]
    return [data.reshape([d for i, d in enumerate(data.shape) if i not in drop])
            for drop in itertools.combinations(units, extra)]


MOVEMENT_OPS = frozenset({"permute", "view", "reshape", "_unsafe_view", "squeeze", "unsqueeze",
                          "flatten", "clone", "contiguous", "transpose", "t", "alias",
                          "_clone_dim_order", "expand", "dropout"})
"""ATen ops that only move data (by name; dropout as in inference): their value is their
input's, rearranged."""


def _moved(point: _Point, host_values: dict):
    """A data-movement op's value computed from its input's host value, None when the op
    moves no data or its input has no host value."""
    node = point.first
    name = getattr(node.target, "__name__", "").split(".")[0]
    if point.node is not node or name not in MOVEMENT_OPS or not node.args:
        return None
    if any(isinstance(a, Node) for a in (*node.args[1:], *node.kwargs.values())):
        return None
    source = node.args[0]
    while isinstance(source, Node) and source.target in _QUANTIZE | _DEQUANTIZE:
        source = source.args[0]
    value = host_values.get(source)
    if value is None:
        return None
    return node.target(value, *node.args[1:], **node.kwargs)


def _layouts(rank: int) -> list[tuple[int, ...]]:
    """The layouts the converter gives tensors: PyTorch's and channels last."""
    identity = tuple(range(rank))
    return [identity] if rank < 3 else [identity, (0, *range(2, rank), 1)]


# -- rows ---------------------------------------------------------------------------------------
@dataclass
class _Values:
    """One op's float, reference and host values over the samples, flattened in float64."""

    floats: list = field(default_factory=list)
    refs: list = field(default_factory=list)
    hosts: list = field(default_factory=list)
    step: float | None = None
    sources: set = field(default_factory=set)

    def add(self, f, r, h, step, source: str) -> None:
        self.floats.append(_flat64(f))
        self.refs.append(_flat64(r))
        self.hosts.append(None if h is None else _flat64(h))
        self.step = step
        self.sources.add(source if h is not None else SOURCE_REFERENCE)

    @property
    def from_host(self) -> bool:
        return bool(self.hosts) and all(h is not None for h in self.hosts)

    @property
    def source(self) -> str:
        return next(iter(self.sources)) if self.from_host and len(self.sources) == 1 \
            else SOURCE_REFERENCE


def _row(op, point: _Point | None, v: _Values, edge_names: dict) -> dict:
    row = {"node": op.node, "op": op.op, "runs_on": op.placement, "source": v.source,
           "measured_at": op.node, "sqnr_db": None, "reference_sqnr_db": None,
           "gap_db": None, "max_error_steps": None, "loss_db": None}
    if point is not None:
        row["measured_at"] = edge_names.get(node_id(point.node), op.node)
    if not v.floats:
        return row
    f, r = torch.cat(v.floats), torch.cat(v.refs)
    h = torch.cat(v.hosts) if v.from_host else r
    row["sqnr_db"] = _db(sqnr_db(f, h))
    row["reference_sqnr_db"] = _db(sqnr_db(f, r))
    if not v.from_host:  # nothing measured on the host: no gap, no step error to give
        return row
    both = math.isfinite(row["sqnr_db"]) and math.isfinite(row["reference_sqnr_db"])
    row["gap_db"] = _db(row["reference_sqnr_db"] - row["sqnr_db"]) if both else 0.0
    if v.step:
        row["max_error_steps"] = round(float((h - r).abs().max()) / v.step, 2) if h.numel() \
            else 0.0
    return row


def _db(x: float) -> float:
    return round(x, 2) if math.isfinite(x) else x


def _input_pairs(first: Node, refs: dict, inputs: dict) -> list:
    """(float, quantized) pairs of the model inputs ``first`` reads through a quantize
    (``inputs``: placeholder -> the sample's tensor)."""
    pairs = []
    for arg in first.all_input_nodes:
        if arg.target not in _DEQUANTIZE or not arg.args:
            continue
        q = arg.args[0]
        src = q.args[0] if isinstance(q, Node) and q.target in _QUANTIZE else None
        if src in inputs:
            pairs.append((inputs[src], refs[arg]))
    return pairs


def _add_losses(rows: list[dict], ops, quantized_inputs: dict) -> None:
    """Fill ``loss_db``: the lowest host SQNR among an op's compute inputs, or (an op fed by
    the model's inputs) the SQNR of those inputs as quantized, minus the op's own."""
    by_node = {r["node"]: r for r in rows}
    for o, r in zip(ops, rows):
        if r["sqnr_db"] is None:
            continue
        before = [by_node[i]["sqnr_db"] for i in o.inputs
                  if i in by_node and by_node[i]["sqnr_db"] is not None]
        if not before:  # per model input: its (float, quantized) pairs over the samples
            for pairs in zip(*quantized_inputs[o.node]):
                before.append(sqnr_db(torch.cat([_flat64(f) for f, _ in pairs]),
                                      torch.cat([_flat64(q) for _, q in pairs])))
        if before:
            loss = min(before) - r["sqnr_db"]
            r["loss_db"] = 0.0 if math.isnan(loss) else _db(loss)


def _flat64(t) -> torch.Tensor:
    return torch.as_tensor(t).double().flatten()


def _order(row: dict):
    """Largest loss first, then largest gap; rows without a loss last."""
    loss = row["loss_db"]
    return (loss is None, -(loss or 0.0), -(row["gap_db"] or 0.0))
