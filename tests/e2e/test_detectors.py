"""Detector heads with their decoding in the graph (``mcu_npu.models.detectors``: YOLOv8-style
anchor-free with DFL, anchor grid from the feature shapes and strides from a tensor, with a
segmentation and a keypoint branch; YOLOv5-style anchor-based; SSD-style raw outputs; a FOMO
centroid map) compile wholly onto the NPU in one partition on the three SoC targets, and hold
the numerics contract over 8 held-out inputs for boxes and for the rest of each output
separately (every host run also runs in ExecuTorch's runtime, bit for bit: conftest). The
YOLO heads failed to compile before: the stride read out of a tensor left a data-dependent
symbol in the graph."""

from __future__ import annotations

import functools

import pytest
import torch

import mcu_npu
from helpers import sqnr_db, sqnr_holds
from mcu_npu.models.detectors import DETECTORS
from mcu_npu.quantization.exact import run_exact
from mcu_npu.report import Kernel

TARGETS = ("corstone-300", "corstone-320", "imxrt700")
SIZE = 64


def pieces(name: str, out) -> dict:
    """A detector's outputs by kind: boxes (pixels) apart from what is concatenated with them."""
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    if name.startswith("yolov8"):
        return {"boxes": out[0][:, :4], "rest": out[0][:, 4:], **{
            f"output {i}": o for i, o in enumerate(out[1:], 1)}}
    if name == "yolov5":
        return {"boxes": out[0][..., :4], "rest": out[0][..., 4:]}
    return {f"output {i}": o for i, o in enumerate(out)}


def measure_pieces(name, prog, model, tests) -> dict:
    """Kind -> (host SQNR, quantized reference SQNR) against the float model over ``tests``."""
    got: dict = {}
    with torch.no_grad():
        for t in tests:
            for run, out in (("float", model(*t)), ("host", prog.run(*t)),
                             ("reference", run_exact(prog.reference, *t))):
                for kind, v in pieces(name, out).items():
                    got.setdefault(kind, {}).setdefault(run, []).append(v.flatten())
    return {kind: tuple(sqnr_db(torch.cat(r["float"]), torch.cat(r[run]))
                        for run in ("host", "reference")) for kind, r in got.items()}


@functools.lru_cache(maxsize=None)
def compiled(name: str, target: str):
    model, example = DETECTORS[name](SIZE)
    g = torch.Generator().manual_seed(1)
    calibration = [(torch.randn(example[0].shape, generator=g),) for _ in range(8)]
    tests = [(torch.randn(example[0].shape, generator=g),) for _ in range(8)]
    prog = mcu_npu.compile(model, example, target=target, calibration=calibration)
    return prog, measure_pieces(name, prog, model, tests)


CASES = [(n, t) for n in DETECTORS for t in TARGETS]


@pytest.mark.slow
@pytest.mark.parametrize("name,target", CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_detector_heads_run_on_the_npu_within_contract(name, target):
    prog, figures = compiled(name, target)
    float_cats = " ".join(n for n in prog.report.notes if "concatenates scores" in n)
    cpu = [(o.node, o.op, o.reason) for o in prog.report.ops
           if o.kernel is not Kernel.NPU and not (o.op == "aten.cat" and float_cats)]
    assert sum(o.kernel is not Kernel.NPU for o in prog.report.ops) <= 1
    assert not cpu, cpu
    assert prog.report.summary["partitions"] == 1, prog.report
    for kind, (host, reference) in figures.items():
        assert sqnr_holds(host, reference), (kind, figures)


@pytest.mark.slow
def test_scores_concatenated_with_boxes_keep_their_precision():
    """YOLOv8's output cat of boxes (pixels) and sigmoid scores runs in float, each input in
    its own int8 scale: the scores' SQNR is 0 dB in one int8 tensor, here >= 25 dB."""
    prog, figures = compiled("yolov8", "corstone-320")
    assert any("concatenates scores" in n for n in prog.report.notes), prog.report.notes
    host, reference = figures["rest"]
    assert host >= 25.0 and sqnr_holds(host, reference), figures
