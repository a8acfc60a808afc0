"""Measure: the serialized program run on the host against the float model and the quantized
reference, for the report's accuracy and, given samples, its per-layer error."""

from __future__ import annotations

import weakref
from typing import Callable

import torch
from torch.fx import GraphModule

from ..upstream.private import fuse_conv_bn
from ..device.program_io import dequantize_outputs, quantize_inputs
from ..devtools.bundled import tolerance_note
from ..errors import ConfigError, stage
from ..graph.ids import node_id
from ..quantization.exact import exact_runner, run_exact
from ..report import Report
from ..estimate.layers import layer_rows
from ..estimate.metrics import flat_outputs, sqnr_db
from ..targets import get_target
from .edge import to_edge_program
from .export import export_module
from .rewrite import for_annotation

ACCURACY_SAMPLES = 8
"""Calibration samples the report's SQNR is measured on, all outputs together: one small
output makes an SQNR swing by several dB."""

HostRun = Callable[[tuple], list]
"""A sample of float model inputs -> the host-run program's outputs as float."""


def measure(program, report: Report, float_model, reference: GraphModule,
            samples: list[tuple], accuracy_samples: list[tuple] | None, state=None):
    """The stage: ``program`` (a ``runtime.Program``: the ``.pte`` as ``check`` read it, with
    its companion's host data) run on the host, the board's tolerance noted in the report (``devtools.bundled.tolerance``), the report's
    accuracy measured on the first ``ACCURACY_SAMPLES`` calibration samples
    and, given ``accuracy_samples``, its per-layer error. Returns ``program``.
    With ``state`` (``program_state.ProgramState``) the samples are a stream: the float
    model (then its lifted graph, a function of inputs and state), the reference and the
    program each carry their own state along it from the initial value, and the program's
    state is reset after."""
    with stage("checking the program's accuracy on the host"):
        report.notes.append(tolerance_note(program))
        run = host_run(program.run, report.io)
        if state:
            program.reset_state()
            report.accuracy = measure_stream(float_model, reference, run,
                                             samples[:STREAM_SAMPLES], state)
            program.reset_state()
        else:
            report.accuracy = measure_accuracy(float_model, reference, run,
                                               samples[:ACCURACY_SAMPLES])
    if accuracy_samples is not None and state:
        report.notes.append("per-layer error is not measured for a program that keeps "
                            "state between calls")
    elif accuracy_samples is not None:
        with stage("measuring the per-layer error"):
            report.layers = layer_errors(report, reference, float_model, run, accuracy_samples)
    return program


def host_run(run: Callable[..., list], io: dict) -> HostRun:
    """``run`` (a program's ``run``) taking and returning float: an int8-I/O program runs on
    the samples quantized with its input parameters, its outputs dequantized with its output
    parameters (``io``, the report's)."""
    return lambda sample: dequantize_outputs(io, run(*quantize_inputs(io, sample)))


def measure_accuracy(float_model, reference: GraphModule, run: HostRun, samples) -> dict:
    """SQNR (dB) of the host-run ``.pte`` and of the quantized reference (evaluated exactly,
    in float64, so the figure is the same on every host) against float, over every output of
    every sample."""
    refs, tests, floats = [], [], []
    exact = exact_runner(reference)
    with torch.no_grad():
        for s in samples:
            floats += flat_outputs(float_model(*s))
            refs += flat_outputs(run_exact(reference, *s, runner=exact))
            tests += flat_outputs(run(s))
    f = torch.cat(floats)
    return {
        "sqnr_db": round(sqnr_db(f, torch.cat(tests)), 2),
        "reference_sqnr_db": round(sqnr_db(f, torch.cat(refs)), 2),
    }


STREAM_SAMPLES = 64
"""Calls of a stream the report's SQNR of a stateful program is measured on: the state's
error builds up along a stream, so more than a forward pass's few samples."""


def measure_stream(float_step, reference: GraphModule, run: HostRun, samples, state) -> dict:
    """``measure_accuracy`` over a stream: the float function of inputs and state
    (``float_step``), the reference (exactly, in float64) and the host run each carry their
    own state from the initial value; only the model's own outputs are compared."""
    exact = exact_runner(reference)
    float_call = state.stepper(float_step)
    reference_call = state.stepper(lambda *a: run_exact(reference, *a, runner=exact))
    refs, tests, floats = [], [], []
    with torch.no_grad():
        for s in samples:
            floats += flat_outputs(float_call(*s))
            refs += flat_outputs(reference_call(*s))
            tests += flat_outputs(run(s))
    f = torch.cat(floats)
    return {
        "sqnr_db": round(sqnr_db(f, torch.cat(tests)), 2),
        "reference_sqnr_db": round(sqnr_db(f, torch.cat(refs)), 2),
    }


def layer_errors(report: Report, reference: GraphModule | None, float_model, run: HostRun,
                 samples) -> list[dict]:
    """The per-layer error of the program ``report`` describes on ``samples`` (tuples of
    float model inputs, or tensors of a one-input model): the float model as it was
    quantized and the Edge names of the reference's nodes, handed with the host run to
    ``estimate.layers.layer_rows``."""
    if reference is None or float_model is None:
        raise ConfigError("per-layer error needs the program as compiled in this process "
                          "(its float model and quantized reference); a loaded .pte has "
                          "neither: compile the model again")
    samples = _sample_tuples(samples)
    edge_ids = _edge_ids(report, reference, samples[0])
    float_graph = _float_graph(float_model, get_target(report.target), samples[0])
    return layer_rows(report.ops, reference, float_graph, edge_ids, run, samples)


def _float_graph(float_model, target, sample: tuple) -> GraphModule:
    """The float model as it was quantized: exported and rewritten by the target's ATen
    passes (exact float rewrites), its nodes tagged with the ids the reference carries, and
    batch norms folded into the convolutions before them as PT2E's prepare does, so a
    convolution's value is the one its quantized counterpart computes. Kept with the float
    model for the next call with the same target, sample and parameters (the precision
    search measures the per-layer error of several programs of one float model)."""
    key = (target, _state_key(float_model))
    kept = _FLOAT_GRAPHS.get(float_model)
    if kept is not None and kept[0] == key and _same_tensors(kept[1], sample):
        return kept[2]
    graph = for_annotation(export_module(float_model, sample), target)
    fuse_conv_bn(graph)
    _FLOAT_GRAPHS[float_model] = (key, tuple(_clone(x) for x in sample), graph)
    return graph


_FLOAT_GRAPHS: "weakref.WeakKeyDictionary[torch.nn.Module, tuple]" = weakref.WeakKeyDictionary()
"""float model -> (target and parameter state, the sample, its float graph), the last made."""


def _state_key(model: torch.nn.Module) -> tuple:
    """Which tensors the model's parameters and buffers are, and their in-place versions."""
    return tuple((name, id(t), t.data_ptr(), t._version)
                 for name, t in model.state_dict(keep_vars=True).items()
                 if isinstance(t, torch.Tensor))


def _clone(x):
    return x.clone() if isinstance(x, torch.Tensor) else x


def _same_tensors(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(
        (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dtype == y.dtype
         and x.shape == y.shape and x.stride() == y.stride() and torch.equal(x, y))
        or (not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor) and x == y)
        for x, y in zip(a, b))


def _edge_ids(report: Report, reference: GraphModule, sample: tuple) -> dict[str, str]:
    """Edge node name -> node id. The report names Edge nodes; the reference converts to
    that Edge program again (the conversion is deterministic, names included)."""
    ids = {o.node: o.ident for o in report.ops if getattr(o, "ident", None)}
    if len(ids) == len(report.ops):
        return ids
    edge = to_edge_program(reference, sample)
    for n in edge.exported_program().graph.nodes:
        ident = node_id(n)
        if n.op == "call_function" and ident is not None:
            ids.setdefault(n.name, ident)
    return ids


def _sample_tuples(samples) -> list[tuple]:
    if isinstance(samples, torch.Tensor):
        samples = [samples]
    out = []
    for s in samples:
        s = (s,) if isinstance(s, torch.Tensor) else tuple(s)
        out.append(tuple(torch.as_tensor(x) for x in s))
    if not out:
        raise ConfigError("accuracy samples are empty: pass at least one model input")
    return out
