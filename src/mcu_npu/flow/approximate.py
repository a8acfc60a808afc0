"""Approximate: on an NPU with no GELU (``NpuSpec.gelu``), the rewrite with every GELU
approximated by operators the NPU runs (``passes.aten.approximate_gelu``), kept where the
whole model's accuracy allows it.

Left exact, each GELU runs on the CPU and splits the NPU's work into partitions around it
(a ViT: one more partition per block). Approximated, the model no longer computes the exact
GELU, so the choice is measured as calibration's ``auto`` measures its ranges (its whole-model
check): the model is quantized with the NPU's rules in both forms and calibrated, each runs
the calibration samples with its quantization simulated in float64, and the SQNR of every
output against the float model with the exact GELU decides. The approximation is kept when
it is no more than ``MAX_LOSS_DB`` below the exact form's, the numerics contract's margin;
the forms are tried cheapest first. The verdict is a note in the report. A GELU named in
``operators_not_to_delegate`` is left exact; so are the GELUs of ExecuTorch recipes
(``recipes``), whose quantizer rewrites the graph before it sees calibration data."""

from __future__ import annotations

import copy

import torch
from torch.fx import GraphModule

from ..errors import stage
from ..partition.support import op_aliases
from ..passes.aten.approximate_gelu import FORMS, is_gelu
from .rewrite import for_annotation

MAX_LOSS_DB = 1.0
"""How far (dB) below the exact GELU's whole-model SQNR an approximation's may fall and be
kept: the margin of the numerics contract (the host against the quantized reference)."""

MAX_SAMPLES = 32
"""Calibration samples the measurement runs (the first ones), as auto's check."""

_LABEL = {"sigmoid": "x * sigmoid(1.702 x)",
          "tanh": "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))"}


def rewrite_approximating(graph: GraphModule, target, samples: list | None,
                          method: str, excluded=()) -> tuple[GraphModule, dict | None]:
    """(the rewritten graph, the GELU verdict or None): ``graph`` rewritten for ``target``
    (``rewrite.for_annotation``), its GELUs approximated where ``target``'s NPU has no GELU
    and the measurement on ``samples`` (with calibration ``method``) allows. A GELU the user
    keeps off the NPU (``excluded``: ``operators_not_to_delegate``) stays exact."""
    gelus = [n for n in graph.graph.nodes if is_gelu(n)]
    kept = set(excluded) & {*op_aliases("aten.gelu"), "*", *(n.name for n in gelus)}
    lacking = not target.npu.gelu and samples and gelus and not kept
    if not lacking:
        with stage("rewriting the model for quantization"):
            return for_annotation(graph, target), None
    with stage("rewriting the model for quantization"):
        exact = for_annotation(copy.deepcopy(graph), target)
    count = sum(is_gelu(n) for n in exact.graph.nodes)
    if not count:
        return exact, None
    samples = list(samples)[:MAX_SAMPLES]
    with stage("measuring GELU approximations"):
        exact_db, reference = whole_model_sqnr(exact, samples, method)
        verdict = {"gelus": count, "exact_sqnr_db": round(exact_db, 2), "tried": {},
                   "samples": len(samples), "form": None}
        for form in FORMS:
            candidate = for_annotation(copy.deepcopy(graph), target, gelu=form)
            db, _ = whole_model_sqnr(candidate, samples, method, reference)
            verdict["tried"][form] = round(db, 2)
            if db >= exact_db - MAX_LOSS_DB:
                verdict["form"] = form
                return candidate, verdict
    return exact, verdict


def whole_model_sqnr(graph: GraphModule, samples: list, method: str,
                     float_outputs: list | None = None) -> tuple[float, list]:
    """(SQNR in dB of every output of ``graph`` on ``samples``, quantized with the NPU's
    rules and calibrated on them by ``method``, simulated in float64 as auto's check does,
    against ``float_outputs`` (by default its own float outputs); those float outputs).
    Auto's per-tensor ranges are taken unchecked: both forms are measured alike, and the
    check would triple the simulations."""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from ..quantization import NpuQuantizer
    from ..quantization.calibration.whole_model import observer_params, simulated_sqnr
    from ..quantization.driver import (_computing_in_float64, calibrate,
                                       torchao_as_quantize_runs_it)

    with torchao_as_quantize_runs_it():
        prepared = prepare_pt2e(copy.deepcopy(graph),
                                NpuQuantizer(calibration_method=method))
        outputs = calibrate(prepared, samples)
        reference = outputs if float_outputs is None else float_outputs
        with _computing_in_float64(prepared):
            db = simulated_sqnr(prepared, observer_params(prepared), samples, reference)
    return db, reference


def note(verdict: dict) -> str:
    """The report's line for ``verdict``."""
    tried = ", ".join(f"{f} {db:.2f} dB" for f, db in verdict["tried"].items())
    head = f"{verdict['gelus']} GELU(s): the NPU has no GELU; "
    tail = (f"(whole-model SQNR of the quantized model on {verdict['samples']} calibration "
            f"samples: exact {verdict['exact_sqnr_db']:.2f} dB; {tried}; an approximation "
            f"is kept within {MAX_LOSS_DB:g} dB of the exact form)")
    if verdict["form"]:
        return head + f"they run as {_LABEL[verdict['form']]} on the NPU " + tail
    return head + "kept exact on the CPU, no approximation holding the contract " + tail
