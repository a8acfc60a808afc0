"""The detector post-processing in C (``firmware.detect_c``): built with gcc on the host it
gives the host's detections (``mcu_npu.detect``) exactly, int8 and float, on random
outputs of every layout and on a compiled program's outputs; arm-none-eabi-gcc builds it
for Cortex-M55 and M33 without heap or libm (issue 52, deliver 3)."""

from __future__ import annotations

import math
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
def test_c_reads_the_parts_of_a_split_output(integer, tmp_path):
    """A YOLOv5-style (1, anchors, 5 + classes) output made of parts xy, wh, objectness and
    class scores (each its own int8 scale, cat on the last dimension): the host and the C
    read each channel from its part and agree; on float parts the detections are those of
    the assembled output."""
    from mcu_npu.device.output_parts import assemble as put_together

    layout = DetectionLayout(classes=3, anchors_last=False, objectness=True)
    g = torch.Generator().manual_seed(7)
    n = ANCHORS
    xy = torch.rand(2, n, generator=g) * 40
    wh = 4 + torch.rand(2, n, generator=g) * 14
    obj, cls = torch.rand(1, n, generator=g), torch.rand(3, n, generator=g)
    floats = [xy, wh, obj, cls]
    params = [(0.25, -100), (0.1, -60), (1 / 250, -125), (1 / 200, -100)]
    parts = [t.t().unsqueeze(0).contiguous() for t in floats]  # (1, anchors, c) each
    record = [{"cat": [{"part": k} for k in range(4)], "dim": 2}]
    quant = []
    if integer:
        quant = [{"scale": sc, "zero_point": zp} for sc, zp in params]
        parts = [torch.clamp(torch.round(t / sc) + zp, -128, 127).to(torch.int8)
                 for t, (sc, zp) in zip(parts, params)]
    for options in ({"score": 0.3}, {"score": 0.2, "class_agnostic": True, "iou": 0.3}):
        p = plan(layout, output_specs(parts, quant), assemble=record, **options)
        assert [b.output for b in p.boxes] == [0, 0, 1, 1] and p.objectness.output == 2
        assert p.scores.output == 3 and p.scores.channel == 1 and p.scores.anchor == 3
        host = detect(parts, layout, quant, assemble=record, **options)
        assert 0 < len(host) < n
        assert run_c(p, parts, tmp_path / str(len(options))) == host_rows(host)
        if integer:
            assert p.threshold == math.floor(options["score"] / (1 / 250 * 1 / 200))
            assert [b.multiplier for b in p.boxes] == [4096, 4096, 1638, 1638]
        else:
            whole = put_together(record, parts)
            assert host_rows(detect(whole, layout, **options)) == host_rows(host)


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


_PROGRAMS: dict = {}


def compiled(detector, io: str):
    """The detector compiled for corstone-300 with ``io`` (once per module)."""
    if io not in _PROGRAMS:
        model, images = detector
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            _PROGRAMS[io] = mcu_npu.compile(model, images[0], target="corstone-300",
                                            calibration=images, io=io)
    return _PROGRAMS[io]


def raw_plan(prog, layout, image, **options):
    """The plan ``save_detect_c`` writes: the program's raw outputs (its parts) with the
    report's assemble record, the layout describing the model's output."""
    raw = prog.run(*prog.quantize_inputs(*image), parts=True)
    return plan(layout, output_specs(raw, prog.report.io),
                assemble=prog.report.program_io.get("assemble"), **options)


@pytest.mark.parametrize("io", ["int8", "float"])
def test_compiled_detector_host_and_c_agree(detector, io, tmp_path):
    prog = compiled(detector, io)
    _, images = detector
    layout = DetectionLayout(classes=3)
    # the scores, a part of their own (1/256 steps), sit between 0.5 and 0.6: at 0.545 some
    # images fill max_boxes and some do not
    options = {"score": 0.545, "iou": 0.3, "max_boxes": 12}
    header, source = prog.save_detect_c(tmp_path / "fw", layout=layout, **options)
    assert header.name == HEADER and source.name == SOURCE
    p = raw_plan(prog, layout, images[0], **options)
    assert header.read_text() == detect_files(p)[HEADER]
    assert p.integer == (io == "int8")
    counts = []
    for k, image in enumerate(images):
        outputs = prog.run(*prog.quantize_inputs(*image), parts=True)
        dets = prog.detect(*image, layout=layout, **options)
        assert run_c(p, outputs, tmp_path / str(k)) == host_rows(dets)
        assert torch.all(dets.boxes[:, 2:] >= dets.boxes[:, :2])
        unsuppressed = prog.detect(*image, layout=layout, **{**options, "iou": 1.0,
                                                             "max_boxes": 64})
        counts.append((len(dets), len(unsuppressed)))
    assert any(n == 12 for n, _ in counts) and any(n < 12 for n, _ in counts)  # capped or not
    assert any(n < min(m, 12) for n, m in counts)  # NMS dropped boxes


@pytest.mark.parametrize("io", ["int8", "float"])
def test_split_detector_c_host_and_float_model_agree(detector, io, tmp_path):
    """The detector's (1, 7, 64) output leaves the program as parts xy (1, 2, 64), wh
    (1, 2, 64) and scores (1, 3, 64), each in its own int8 scale: the layout still describes
    the model's output, the C reads each channel from its part and gives the host's
    detections exactly, and these are the float model's on most images."""
    model, images = detector
    prog = compiled(detector, io)
    assemble = prog.report.program_io.get("assemble")
    assert [q["shape"] for q in prog.report.program_io["parts"]] == \
        [[1, 2, 64], [1, 2, 64], [1, 3, 64]]
    assert assemble == [{"cat": [{"part": 0}, {"part": 1}, {"part": 2}], "dim": 1}]
    layout = DetectionLayout(classes=3)
    options = {"score": 0.545, "iou": 0.3, "max_boxes": 12}
    p = raw_plan(prog, layout, images[0], **options)
    assert [b.output for b in p.boxes] == [0, 0, 1, 1] and p.scores.output == 2
    assert [b.offset for b in p.boxes] == [0, 64, 0, 64] and p.num_outputs == 3
    if io == "int8":
        scales = [o["scale"] for o in prog.report.io["outputs"]]
        assert scales[0] != scales[1]  # xy and wh: one common box unit, exact multipliers
        top = max(scales[:2])
        assert [b.multiplier for b in p.boxes] == \
            [round(4096 * scales[k] / top) for k in (0, 0, 1, 1)]
        assert p.box_unit == top / 8192
        assert p.threshold == math.floor(0.545 / scales[2])  # in the score part's own scale
    same = 0
    for k, image in enumerate(images):
        raw = prog.run(*prog.quantize_inputs(*image), parts=True)
        assert len(raw) == 3
        dets = prog.detect(*image, layout=layout, **options)
        assert run_c(p, raw, tmp_path / str(k)) == host_rows(dets)
        # what run returns (assembled for float I/O, the parts for int8) reads the same
        ran = prog.run(*prog.quantize_inputs(*image))
        assert host_rows(detect(ran, layout, prog.report.io, **options)) == host_rows(dets)
        ref = detect([model(*image).detach()], layout, **options)
        same += len(ref) == len(dets)
        if len(ref) and len(dets):
            assert int(dets.anchors[0]) == int(ref.anchors[0])
            assert torch.allclose(dets.boxes[0], ref.boxes[0], atol=1.0)
    assert same >= len(images) - 1
    loaded = mcu_npu.load(prog.save(tmp_path / "detector.pte"))  # the report read with it
    assert host_rows(loaded.detect(*images[0], layout=layout, **options)) == \
        host_rows(prog.detect(*images[0], layout=layout, **options))


def test_save_detect_c_refuses_a_file_name_and_a_wrong_layout(detector, tmp_path):
    _, images = detector
    prog = compiled(detector, "float")
    with pytest.raises(ConfigError, match="into a folder"):
        prog.save_detect_c(tmp_path / "detect.h", layout=DetectionLayout(classes=3))
    with pytest.raises(ConfigError, match="need 8 channels.*has 7"):
        prog.save_detect_c(tmp_path, layout=DetectionLayout(classes=4))
    with pytest.raises(ConfigError, match="need 8 channels.*has 7"):
        prog.detect(*images[0], layout=DetectionLayout(classes=3, objectness=True))
    assert not list(tmp_path.iterdir())
