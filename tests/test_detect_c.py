"""The detector post-processing in C (``firmware.detect_c``): built with gcc on the host it
gives the host's detections (``mcu_npu.detect``) exactly, int8 and float, on random
outputs of every layout and on a compiled program's outputs; arm-none-eabi-gcc builds it
for Cortex-M55 and M33 without heap or libm (issue 52, deliver 3)."""

from __future__ import annotations

import shutil
import subprocess
import warnings

import pytest
import torch
from torch import nn

import mcu_npu
from detect_c_run import FLAGS, host_rows, run_c
from mcu_npu.detect import DetectionLayout, detect, output_specs, plan
from mcu_npu.errors import ConfigError
from mcu_npu.firmware.detect_c import HEADER, SOURCE, detect_files

ARM_GCC = shutil.which("arm-none-eabi-gcc")
ANCHORS = 96


def outputs_for(layout: DetectionLayout, integer: bool, seed: int):
    """Random detector outputs for ``layout``: boxes clustered so many overlap, a few
    anchors duplicated (equal scores and boxes: ties), and the int8 parameters."""
    g = torch.Generator().manual_seed(seed)
    n = ANCHORS
    cx, cy = torch.rand(n, generator=g) * 40, torch.rand(n, generator=g) * 40
    w, h = 4 + torch.rand(n, generator=g) * 14, 4 + torch.rand(n, generator=g) * 14
    box = torch.stack([cx, cy, w, h] if layout.boxes == "xywh" else
                      [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
    scores = torch.rand(layout.score_channels, n, generator=g)
    box[:, 10:14], scores[:, 10:14] = box[:, 20:24], scores[:, 20:24]  # ties
    parts = [box, scores]
    quant = []
    if integer:
        for i, part in enumerate(parts):
            scale, zp = (0.25, -100) if i == 0 else (1 / 250, -125)
            parts[i] = torch.clamp(torch.round(part / scale) + zp, -128, 127).to(torch.int8)
            quant.append({"scale": scale, "zero_point": zp})
    if len(layout.outputs) == 1:
        parts = [torch.cat(parts)]
        quant = [{"scale": 0.25, "zero_point": -3}] if integer else []
        if integer:  # one tensor, one scale: requantize the float values
            whole = torch.cat([box, scores])
            parts = [torch.clamp(torch.round(whole / 0.25) - 3, -128, 127).to(torch.int8)]
    if not layout.anchors_last:
        parts = [p.t() for p in parts]
    outs = [p.unsqueeze(0).contiguous() for p in parts]
    if len(layout.outputs) == 2 and layout.outputs != (0, 1):
        outs, quant = outs[::-1], quant[::-1]
    return outs, quant


LAYOUTS = {
    "yolov8": DetectionLayout(classes=3),
    "yolov5": DetectionLayout(classes=4, anchors_last=False, objectness=True),
    "split": DetectionLayout(classes=2, outputs=(0, 1)),
    "split-swapped-xyxy": DetectionLayout(classes=3, boxes="xyxy", anchors_last=False,
                                          outputs=(1, 0)),
    "split-objectness": DetectionLayout(classes=3, objectness=True, outputs=(0, 1)),
}


@pytest.mark.parametrize("integer", [True, False], ids=["int8", "float"])
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_c_gives_the_host_detections(name, integer, tmp_path):
    layout = LAYOUTS[name]
    outs, quant = outputs_for(layout, integer, seed=len(name))
    score = 0.02 if integer and layout.objectness and len(layout.outputs) == 1 else 0.3
    for options in ({}, {"max_boxes": 7, "iou": 0.3}, {"class_agnostic": True},
                    {"max_candidates": 9}):
        p = plan(layout, output_specs(outs, quant), score=score, **options)
        host = detect(outs, layout, quant, score=score, **options)
        assert 0 < len(host) < ANCHORS
        c = run_c(p, outs, tmp_path / str(len(options)) / "_".join(options))
        assert c == host_rows(host), options


@pytest.mark.parametrize("integer", [True, False], ids=["int8", "float"])
def test_c_gives_no_detections_over_every_score(integer, tmp_path):
    layout = LAYOUTS["yolov8"]
    outs, quant = outputs_for(layout, integer, seed=3)
    p = plan(layout, output_specs(outs, quant), score=40.0)
    assert len(detect(outs, layout, quant, score=40.0)) == 0
    assert run_c(p, outs, tmp_path) == []


@pytest.mark.skipif(ARM_GCC is None, reason="arm-none-eabi-gcc is not installed")
@pytest.mark.parametrize("cpu", ["cortex-m55", "cortex-m33"])
@pytest.mark.parametrize("integer", [True, False], ids=["int8", "float"])
def test_c_builds_for_cortex_m_without_heap_or_libm(cpu, integer, tmp_path):
    layout = LAYOUTS["yolov5"]
    outs, quant = outputs_for(layout, integer, seed=1)
    for name, text in detect_files(plan(layout, output_specs(outs, quant))).items():
        (tmp_path / name).write_text(text)
    obj = tmp_path / "detect.o"
    subprocess.run([ARM_GCC, f"-mcpu={cpu}", "-mthumb", "-mfloat-abi=hard", *FLAGS, "-c",
                    "-o", str(obj), SOURCE], check=True, cwd=tmp_path)
    symbols = subprocess.run(["arm-none-eabi-nm", str(obj)], check=True, capture_output=True,
                             text=True).stdout
    assert " T mcu_npu_detect" in symbols
    undefined = {line.split()[-1] for line in symbols.splitlines() if " U " in line}
    assert not undefined & {"malloc", "calloc", "free", "realloc", "fminf", "fmaxf", "floorf"}
    assert not {u for u in undefined if not u.startswith("__aeabi_")}, undefined
    assert (tmp_path / HEADER).exists()


@pytest.mark.parametrize("compiler", ["gcc", "arm-none-eabi-gcc"])
def test_float_c_has_no_fused_multiply_add(compiler, tmp_path):
    """Built with contraction on and FMA instructions available, the float path still
    rounds each product as the host does: no fused multiply-add in the code."""
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed")
    layout = LAYOUTS["yolov5"]
    outs, quant = outputs_for(layout, False, seed=1)
    for name, text in detect_files(plan(layout, output_specs(outs, quant))).items():
        (tmp_path / name).write_text(text)
    cpu = ["-mfma"] if compiler == "gcc" else ["-mcpu=cortex-m55", "-mthumb",
                                               "-mfloat-abi=hard"]
    asm = subprocess.run([compiler, *cpu, "-std=gnu99", "-O2", "-ffp-contract=fast", "-S",
                          "-o", "-", SOURCE], check=True, cwd=tmp_path, capture_output=True,
                         text=True).stdout
    assert "mcu_npu_detect" in asm
    assert not [line for line in asm.splitlines()
                if line.strip().startswith(("vfm", "vfnm"))], "fused multiply-add emitted"


class Detector(nn.Module):
    """A detector-shaped network: a 32x32 image to 64 anchors on an 8x8 grid, boxes in
    pixels (centre, size) then 3 sigmoid class scores, as YOLOv8 exports (1, 4 + 3, 64)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                  nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU())
        self.box = nn.Conv2d(8, 4, 1)
        self.cls = nn.Conv2d(8, 3, 1)

        gy, gx = torch.meshgrid(torch.arange(8.), torch.arange(8.), indexing="ij")
        self.register_buffer("grid", torch.stack([gx, gy]).reshape(1, 2, 64))

    def forward(self, x):
        f = self.body(x)
        b = torch.sigmoid(self.box(f)).flatten(2)
        xy = (b[:, :2] * 2 - 0.5 + self.grid) * 4  # centres decoded on the 8x8 grid, pixels
        wh = b[:, 2:] * 24
        return torch.cat([xy, wh, torch.sigmoid(self.cls(f)).flatten(2)], 1)


@pytest.fixture(scope="module")
def detector():
    torch.manual_seed(0)
    model = Detector().eval()
    g = torch.Generator().manual_seed(1)
    images = [(torch.randn(1, 3, 32, 32, generator=g),) for _ in range(4)]
    return model, images


@pytest.mark.parametrize("io", ["int8", "float"])
def test_compiled_detector_host_and_c_agree(detector, io, tmp_path):
    model, images = detector
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        prog = mcu_npu.compile(model, images[0], target="corstone-300", calibration=images,
                               io=io)
    layout = DetectionLayout(classes=3)
    options = {"score": 0.5, "iou": 0.3, "max_boxes": 12}
    header, source = prog.save_detect_c(tmp_path / "fw", layout=layout, **options)
    assert header.name == HEADER and source.name == SOURCE
    p = plan(layout, output_specs(prog.run(*prog.quantize_inputs(*images[0])),
                                  prog.report.io), **options)
    assert header.read_text() == detect_files(p)[HEADER]
    assert p.integer == (io == "int8")
    counts = []
    for k, image in enumerate(images):
        outputs = prog.run(*prog.quantize_inputs(*image))
        dets = prog.detect(*image, layout=layout, **options)
        assert run_c(p, outputs, tmp_path / str(k)) == host_rows(dets)
        assert torch.all(dets.boxes[:, 2:] >= dets.boxes[:, :2])
        unsuppressed = prog.detect(*image, layout=layout, **{**options, "iou": 1.0,
                                                             "max_boxes": 64})
        counts.append((len(dets), len(unsuppressed)))
    assert any(n == 12 for n, _ in counts) and any(n < 12 for n, _ in counts)  # capped or not
    assert any(n < min(m, 12) for n, m in counts)  # NMS dropped boxes


def test_save_detect_c_refuses_a_file_name_and_a_wrong_layout(detector, tmp_path):
    model, images = detector
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        prog = mcu_npu.compile(model, images[0], target="corstone-300", calibration=images)
    with pytest.raises(ConfigError, match="into a folder"):
        prog.save_detect_c(tmp_path / "detect.h", layout=DetectionLayout(classes=3))
    with pytest.raises(ConfigError, match="need 8 channels.*has 7"):
        prog.save_detect_c(tmp_path, layout=DetectionLayout(classes=4))
    with pytest.raises(ConfigError, match="need 8 channels.*has 7"):
        prog.detect(*images[0], layout=DetectionLayout(classes=3, objectness=True))
    assert not list(tmp_path.iterdir())
