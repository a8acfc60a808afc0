"""Detector heads with their decoding in the graph (``mcu_npu.models.detectors``: YOLOv8-style
anchor-free with DFL, anchor grid from the feature shapes and strides from a tensor, with a
segmentation and a keypoint branch; YOLOv5-style anchor-based; SSD-style raw outputs; a FOMO
centroid map) compile wholly onto the NPU in one partition on the three SoC targets and hold
the numerics contract over 8 held-out inputs for boxes, scores, keypoints, visibilities,
coefficients and prototypes separately (every host run also runs in ExecuTorch's runtime, bit
for bit: conftest). An output concatenating boxes in pixels with scores in [0, 1] leaves the
program as its parts, each in its own int8 scale, and ``run`` puts them back together: the
scores keep >= 25 dB where one int8 tensor gives them < 10 dB (0 dB before)."""

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
    """A detector's outputs by kind: boxes and keypoints (pixels), scores (sigmoid or softmax),
    mask coefficients and prototypes, each judged on its own."""
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    y = out[0]
    if name == "yolov8":
        return {"boxes": y[:, :4], "scores": y[:, 4:]}
    if name == "yolov8_seg":
        return {"boxes": y[:, :4], "scores": y[:, 4:7], "coefficients": y[:, 7:],
                "prototypes": out[1]}
    if name == "yolov8_pose":
        k = y[:, 5:].reshape(y.shape[0], -1, 3, y.shape[-1])
        return {"boxes": y[:, :4], "scores": y[:, 4:5], "keypoints": k[:, :, :2],
                "visibility": k[:, :, 2]}
    if name == "yolov5":
        return {"boxes": y[..., :4], "scores": y[..., 4:]}
    if name == "ssd":
        return {"boxes": y, "scores": out[1]}
    return {"scores": y}


SCORED = {"yolov8", "yolov8_seg", "yolov8_pose", "yolov5"}
"""Heads whose one output concatenates scores in [0, 1] with boxes in pixels."""


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
    calibration, tests = samples(example)
    prog = mcu_npu.compile(model, example, target=target, calibration=calibration)
    return prog, measure_pieces(name, prog, model, tests)


def samples(example):
    """8 calibration and 8 held-out inputs."""
    g = torch.Generator().manual_seed(1)
    drawn = [(torch.randn(example[0].shape, generator=g),) for _ in range(16)]
    return drawn[:8], drawn[8:]


CASES = [(n, t) for n in DETECTORS for t in TARGETS]


@pytest.mark.slow
@pytest.mark.parametrize("name,target", CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_detector_heads_run_on_the_npu_within_contract(name, target):
    prog, figures = compiled(name, target)
    cpu = [(o.node, o.op, o.reason) for o in prog.report.ops if o.kernel is not Kernel.NPU]
    assert not cpu, cpu
    assert prog.report.summary["partitions"] == 1, prog.report
    for kind, (host, reference) in figures.items():
        assert sqnr_holds(host, reference), (kind, figures)
    parts = prog.report.program_io.get("parts", [])
    if name in SCORED:  # the scores leave the program in an output of their own
        assert figures["scores"][0] >= 25.0, figures
        assert len(parts) >= 2 and any("returned as its parts" in n for n in prog.report.notes)
    else:
        assert not parts and "assemble" not in prog.report.program_io


def one_int8_tensor(y: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """``y`` through one per-tensor int8 quantization of range [lo, hi]."""
    scale = (hi - lo) / 255
    zero = round(-128 - lo / scale)
    return (torch.clamp(torch.round(y / scale) + zero, -128, 127) - zero) * scale


@pytest.mark.slow
@pytest.mark.parametrize("name", ["yolov8", "yolov5"])
def test_scores_concatenated_with_boxes_keep_their_precision(name, tmp_path):
    """In one int8 tensor the scores of a boxes-and-scores output fall below 10 dB; split into
    program outputs of their own (one per range) they keep >= 25 dB, on the NPU, and ``run``
    gives the model's one output (also read back from the saved program and companion)."""
    prog, figures = compiled(name, "corstone-320")
    model, example = DETECTORS[name](SIZE)
    calibration, tests = samples(example)
    with torch.no_grad():
        seen = torch.cat([model(*c).flatten() for c in calibration])
        outs = [model(*t) for t in tests]
    lo, hi = min(seen.min().item(), 0.0), max(seen.max().item(), 0.0)
    floats = torch.cat([pieces(name, o)["scores"].flatten() for o in outs])
    squeezed = torch.cat([pieces(name, one_int8_tensor(o, lo, hi))["scores"].flatten()
                          for o in outs])
    assert sqnr_db(floats, squeezed) < 10.0
    assert figures["scores"][0] >= 25.0 and sqnr_holds(*figures["scores"]), figures
    got = prog.run(*tests[0])
    assert len(got) == 1 and got[0].shape == outs[0].shape
    assert len(prog.report.program_io["outputs"]) == 2, prog.report.program_io
    loaded = mcu_npu.load(prog.save(tmp_path / "detector.pte"))
    assert torch.equal(loaded.run(*tests[0])[0], got[0])


@pytest.mark.slow
def test_int8_outputs_give_each_part_its_parameters():
    """With io="int8" each part is an int8 program output with its own scale (a float cat
    made the program's int8 outputs impossible); ``dequantize_outputs`` assembles them."""
    model, example = DETECTORS["yolov8"](SIZE)
    calibration, tests = samples(example)
    prog = mcu_npu.compile(model, example, target="imxrt700", calibration=calibration,
                           io="int8")
    scales = [o["scale"] for o in prog.report.io["outputs"]]
    assert len(scales) == 2 and scales[0] > 50 * scales[1], prog.report.io
    with torch.no_grad():
        floats = [model(*t) for t in tests]
        raw = [prog.run(*prog.quantize_inputs(*t)) for t in tests]
    assert all(len(r) == 2 and r[0].dtype == torch.int8 for r in raw)
    got = [prog.dequantize_outputs(r)[0] for r in raw]
    f = torch.cat([pieces("yolov8", y)["scores"].flatten() for y in floats])
    q = torch.cat([pieces("yolov8", y)["scores"].flatten() for y in got])
    assert sqnr_db(f, q) >= 25.0
