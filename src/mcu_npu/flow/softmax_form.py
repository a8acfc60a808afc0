"""Softmax form: on an NPU whose compiler makes TFLite's SOFTMAX a long program
(``NpuSpec.table_softmax``), a model's final softmax runs as a short chain of tables
(``tflite/ops/softmax.py``: 3.2 KB less flash on the U85-256) where the whole model's accuracy
allows it.

The chain rounds its sum and ``1/sum`` to int8, so it is less precise than TFLite's SOFTMAX,
by how much depends on the model. The choice is measured as ``flow.approximate`` measures a
GELU's: the quantized reference runs the calibration samples exactly (float64); at each
final softmax (one whose value is only an output of the model, over 2 to
``MAX_TABLE_CLASSES`` classes, int8) the chain is simulated on the reference's own int8
input; the chain is kept when the whole model's SQNR against the float model, over every
output, is no more than ``MAX_LOSS_DB`` below the reference's with its exact softmax. The
verdict is a note in the report, and the kept softmax nodes of the Edge graph are marked
(``TABLES``) for the converter."""

from __future__ import annotations

import numpy as np
import torch
from torch.fx import GraphModule, Node

from ..errors import first_line, stage
from ..program_state import leaves
from ..quantization.exact import exact_runner
from ..estimate.metrics import flat_outputs, sqnr_db
from ..tflite.ops.softmax import MAX_TABLE_CLASSES, TABLES, simulate_tables
from .approximate import MAX_LOSS_DB

MAX_SAMPLES = 8
"""Calibration samples the choice is measured on (the first ones, as many as the report's
SQNR): the reference runs each exactly, in float64, about a fifth of a DS-CNN's compile."""

_SOFTMAX = ("aten._softmax.default", "aten.softmax.int")


def _name(node: Node) -> str:
    return str(node.target) if node.op == "call_function" else ""


def _is_qdq(node: Node) -> bool:
    name = _name(node)
    return "quantize_per_tensor" in name  # quantize and dequantize


def _reaches_only_outputs(node: Node) -> bool:
    frontier, seen = list(node.users), set()
    while frontier:
        user = frontier.pop()
        if user in seen or user.op == "output":
            continue
        seen.add(user)
        if not _is_qdq(user):
            return False
        frontier.extend(user.users)
    return True


def final_softmaxes(gm: GraphModule) -> dict[int, Node]:
    """Output position (flattened, as ``flat_outputs`` orders them) -> the softmax whose
    value that output is (through quantize / dequantize only), for softmaxes quantized to
    int8 over 2 to ``MAX_TABLE_CLASSES`` classes whose value reaches nothing but outputs."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    found = {}
    for i, arg in enumerate(leaves(output.args[0])):
        node = arg
        while isinstance(node, Node) and _is_qdq(node):
            node = node.args[0]
        if not isinstance(node, Node) or not any(s in _name(node) for s in _SOFTMAX) or \
                not (isinstance(node.args[0], Node) and "dequantize" in _name(node.args[0])):
            continue
        quants = [u for u in node.users if "quantize_per_tensor" in _name(u)
                  and "dequantize" not in _name(u)]
        if len(quants) != len(node.users) or any(q.args[-1] != torch.int8 for q in quants):
            continue
        val = node.meta.get("val")
        classes = int(val.shape[node.args[1] % val.dim()]) if val is not None else 0
        if 2 <= classes <= MAX_TABLE_CLASSES and _reaches_only_outputs(node):
            found[i] = node
    return found


def choose(edge_graph: GraphModule, reference: GraphModule, float_model, samples,
           target) -> dict | None:
    """Mark the final softmaxes of ``edge_graph`` that run as the chain of tables (see the
    module docstring); the verdict for the report, or None where there is nothing to
    choose."""
    if not (target.npu.table_softmax and samples):
        return None
    try:
        at_ref, at_edge = final_softmaxes(reference), final_softmaxes(edge_graph)
    except Exception:  # noqa: BLE001  (a graph this reading does not know: SOFTMAX stays)
        return None
    positions = sorted(set(at_ref) & set(at_edge))
    if not positions:
        return None
    samples = list(samples)[:MAX_SAMPLES]
    with stage("measuring the softmax as tables"):
        try:
            exact_db, tables_db = _measure(reference, float_model, samples, at_ref, positions)
        except Exception as exc:  # noqa: BLE001  (a saving, never a failed compile)
            return {"softmaxes": len(positions), "samples": len(samples), "tables": False,
                    "error": f"{type(exc).__name__}: {first_line(exc)}"}
    kept = tables_db >= exact_db - MAX_LOSS_DB
    if kept:
        for i in positions:
            at_edge[i].meta[TABLES] = True
    return {"softmaxes": len(positions), "exact_sqnr_db": round(exact_db, 2),
            "tables_sqnr_db": round(tables_db, 2), "samples": len(samples), "tables": kept}


def _measure(reference, float_model, samples, at_ref: dict, positions) -> tuple[float, float]:
    """(SQNR of the reference, SQNR with the chain at ``positions``) against the float model
    over every output of ``samples``."""
    runner = exact_runner(reference)
    floats, exact, tables = [], [], []
    with torch.no_grad():
        for s in samples:
            keep: dict = {}
            outs = flat_outputs(runner(*s, keep=keep))
            floats += flat_outputs(float_model(*s))
            exact += outs
            tables += [_tables_output(at_ref[i], keep) if i in positions else o
                       for i, o in enumerate(outs)]
    f = torch.cat(floats)
    return sqnr_db(f, torch.cat(exact)), sqnr_db(f, torch.cat(tables))


def _tables_output(softmax: Node, keep: dict) -> torch.Tensor:
    """The chain's output for the softmax's input as the reference computed it."""
    dq = softmax.args[0]
    x = keep[dq].detach().double().numpy()
    scale = float(dq.args[1])
    dim = softmax.args[1] % x.ndim
    xq = np.round(np.moveaxis(x, dim, -1) / scale)
    y = np.moveaxis(simulate_tables(xq, scale), -1, dim)
    return torch.from_numpy(np.ascontiguousarray(y)).flatten()


def note(verdict: dict) -> str:
    """The report's line for ``verdict``."""
    head = f"final softmax ({verdict['softmaxes']}): "
    if "error" in verdict:
        return head + f"runs as TFLite's SOFTMAX: the chain of tables could not be measured " \
            f"({verdict['error']})"
    tail = (f"(whole-model SQNR on {verdict['samples']} calibration samples: TFLite SOFTMAX "
            f"{verdict['exact_sqnr_db']:.2f} dB, tables {verdict['tables_sqnr_db']:.2f} dB; "
            f"tables are kept within {MAX_LOSS_DB:g} dB)")
    if verdict["tables"]:
        return head + "runs as a chain of tables (max, exp, sum, 1/sum, multiply), " \
            "smaller than TFLite's SOFTMAX in the NPU's program " + tail
    return head + "runs as TFLite's SOFTMAX: the smaller chain of tables would lose " \
        "accuracy " + tail
