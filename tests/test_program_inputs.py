"""Program inputs as the sensor gives them (``compile(..., inputs=...)``, ``mcu-npu compile
--input-dtype/--input-layout/--input-mean/--input-std``): a camera's uint8 HWC pixels and a
front-end's int8 (or int16) features go into the program as they are, the program gives the
answers of the float model fed the normalised channels-first data within the numerics
contract, and no CPU op converts them at the program's input (the dtype change, the layout
and the normalisation run on the NPU, or the normalisation is the input's quantization).

The expected answers are computed here, independently of the compiler: the model run in
float on ``(x.permute(...) - mean) / std``. Host and ExecuTorch runtime agree bit for bit
(``conftest``: every host run of a slow test is repeated in ExecuTorch's runtime).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import mcu_npu
from helpers import run_cli, sqnr_holds
from mcu_npu.errors import ConfigError
from mcu_npu.estimate.metrics import sqnr_db
from mcu_npu.runtime import load_program

TARGETS = ("imxrt700", "corstone-300")
BOUNDARY_KINDS = {"quantize", "dequantize", "transpose"}
MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)  # ImageNet's, in pixel units


class ImageNet(nn.Module):
    """A small convnet on normalised NCHW images."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        x = torch.relu(self.c2(torch.relu(self.c1(x))))
        return self.fc(x.mean((2, 3)))


class FeatureNet(nn.Module):
    """A small temporal convnet on normalised (N, C, T) features."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(10, 16, 3, padding=1)
        self.c2 = nn.Conv1d(16, 16, 3)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.c2(torch.relu(self.c1(x)))).mean(-1))


def pixels(n: int, seed: int) -> list[tuple[torch.Tensor]]:
    """uint8 HWC images: a smooth picture per channel plus noise, as a camera gives them."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        base = torch.rand(1, 4, 4, 3, generator=g) * 200 + 20
        image = nn.functional.interpolate(base.permute(0, 3, 1, 2), size=(16, 16),
                                          mode="bilinear").permute(0, 2, 3, 1)
        image = image + torch.randn(image.shape, generator=g) * 12
        out.append((image.round().clamp(0, 255).to(torch.uint8),))
    return out


FEATURE_MEAN = tuple(float(v) for v in range(-5, 5))
FEATURE_STD = tuple(20.0 + 3 * i for i in range(10))


def features(n: int, seed: int) -> list[tuple[torch.Tensor]]:
    """int8 (N, T, C) features (frames of 10 coefficients), as a front-end gives them."""
    g = torch.Generator().manual_seed(seed)
    mean = torch.tensor(FEATURE_MEAN)
    std = torch.tensor(FEATURE_STD)
    return [((torch.randn(1, 24, 10, generator=g) * std + mean).round().clamp(-128, 127)
             .to(torch.int8),) for _ in range(n)]


def features16(n: int, seed: int) -> list[tuple[torch.Tensor]]:
    """int16 (N, T, C) features, as a 16-bit front-end gives them."""
    g = torch.Generator().manual_seed(seed)
    return [((torch.randn(1, 24, 10, generator=g) * 3000).round().to(torch.int16),)
            for _ in range(n)]


def normalised(x: torch.Tensor, mean, std) -> torch.Tensor:
    """What the float model expects: channels first, ``(x - mean) / std`` in float64."""
    x = x.double().permute(0, x.dim() - 1, *range(1, x.dim() - 1))
    shape = (1, -1, *([1] * (x.dim() - 2)))
    mean = torch.tensor(mean, dtype=torch.float64).reshape(shape)
    std = torch.tensor(std, dtype=torch.float64).reshape(shape)
    return ((x - mean) / std).float()


CASES = {
    "uint8-hwc-image": (ImageNet, pixels, mcu_npu.InputSpec(
        dtype="uint8", layout="channels_last", mean=MEAN, std=STD), MEAN, STD),
    "int8-features": (FeatureNet, features, mcu_npu.InputSpec(
        dtype="int8", layout="channels_last", mean=FEATURE_MEAN, std=FEATURE_STD),
        FEATURE_MEAN, FEATURE_STD),
    # 8 bits cannot hold 16: quantized with its calibrated range, converted on the NPU
    "int16-features": (FeatureNet, features16, mcu_npu.InputSpec(
        dtype="int16", layout="channels_last", std=(3000.0,)), (0.0,) * 10, (3000.0,) * 10),
}


def _compile(case: str, target: str):
    net, data, spec, mean, std = CASES[case]
    torch.manual_seed(0)
    model = net().eval()
    calibration = data(16, seed=1)
    prog = mcu_npu.compile(model, calibration[0], target=target, calibration=calibration,
                           inputs=spec)
    return model, prog, data(8, seed=2), mean, std


@pytest.fixture(scope="module", params=[(c, t) for c in CASES for t in TARGETS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def compiled(request):
    return request.param, _compile(*request.param)


@pytest.mark.slow
def test_program_takes_the_sensor_data_and_answers_as_the_float_model(compiled):
    (case, target), (model, prog, held_out, mean, std) = compiled
    raw = held_out[0][0]
    specs = mcu_npu.load(prog.buffer).input_specs
    assert [(s.shape, s.dtype) for s in specs] == [(tuple(raw.shape), raw.dtype)]
    with torch.no_grad():
        want = torch.cat([model(normalised(x, mean, std)) for (x,) in held_out])
        ref = torch.cat([prog.reference(x.float())[0] for (x,) in held_out])
    got = torch.cat([prog.run(x)[0] for (x,) in held_out])  # conftest: == ExecuTorch's run
    assert got.dtype == torch.float32  # outputs follow io="float": dequantized
    host, reference = sqnr_db(want, got), sqnr_db(want, ref)
    assert reference > 25, reference
    assert sqnr_holds(host, reference), (host, reference)


@pytest.mark.slow
def test_no_cpu_op_converts_the_input(compiled):
    (case, target), (model, prog, held_out, mean, std) = compiled
    ops = set(load_program(prog.buffer).operator_names)
    # the float outputs' dequantize is all the CPU converts
    assert not {o for o in ops if o.endswith("::quantize_per_tensor") or "permute" in o
                or "transpose" in o}, ops
    first = [o for o in prog.report.ops if o.op == "aten.permute_copy"]
    assert first and all(o.kernel == "npu" for o in first), first
    rows = prog.report.latency["rows"]
    at_input = [r for r in rows if r["runs_on"] != "npu" and r["kind"] in BOUNDARY_KINDS
                and "output" not in r["node"] and "dequantize" not in r["op"]]
    assert not at_input, at_input
    record = prog.report.summary["io"]["inputs"][0]  # real = q: the sensor's numbers
    assert (record["dtype"], record["scale"], record["zero_point"]) == \
        (CASES[case][2].dtype, 1.0, 0)


@pytest.mark.slow
def test_int8_outputs_are_the_float_outputs_quantized():
    model, prog, held_out, mean, std = _compile("uint8-hwc-image", "corstone-300")
    _, data, spec, *_ = CASES["uint8-hwc-image"]
    calibration = data(16, seed=1)
    int8_prog = mcu_npu.compile(model, calibration[0], target="corstone-300",
                                calibration=calibration, inputs=spec, outputs="int8")
    for (x,) in held_out:
        raw = int8_prog.run(x)
        assert raw[0].dtype == torch.int8
        assert torch.equal(int8_prog.dequantize_outputs(raw)[0], prog.run(x)[0])


# --- declarations the compiler cannot use -----------------------------------------------------
def _declare(inputs, example=None):
    example = torch.zeros(1, 8, 8, 3, dtype=torch.uint8) if example is None else example
    with pytest.warns(UserWarning, match="no calibration data"):
        mcu_npu.compile(ImageNet(), example, target="corstone-300", inputs=inputs)


@pytest.mark.parametrize("inputs, message", [
    (mcu_npu.InputSpec(dtype="rgb565"),
     r"inputs\[0\]: unknown dtype 'rgb565'; choose one of: uint8, int8, int16, float"),
    (mcu_npu.InputSpec(dtype="uint8", layout="hwc"),
     r"inputs\[0\]: unknown layout 'hwc'; choose one of: channels_first, channels_last"),
    (mcu_npu.InputSpec(dtype="uint8", layout="channels_last", mean=(1.0, 2.0)),
     r"inputs\[0\]: mean has 2 values but the input has 3 channels \(its last axis, "
     r"channels_last\); give one value per channel, or one for all"),
    (mcu_npu.InputSpec(dtype="uint8", layout="channels_last", std=(1.0, 0.0, 1.0)),
     r"std holds a zero"),
    ({1: mcu_npu.InputSpec(dtype="uint8")},
     r"inputs= declares input 1, but the model takes 1 input\(s\) \(indices 0..0\)"),
    ({"dtype": "uint8", "scale": 2}, r"unknown key\(s\) scale"),
    (mcu_npu.InputSpec(dtype="int8", layout="channels_last"),
     r"inputs\[0\] is declared int8 but the example input is uint8; give the example and "
     r"calibration inputs as the sensor gives them \(int8\)"),
])
def test_bad_declaration_names_the_problem_and_the_fix(inputs, message):
    with pytest.raises(ConfigError, match=message):
        mcu_npu.compile(ImageNet(), torch.zeros(1, 8, 8, 3, dtype=torch.uint8),
                        target="corstone-300", inputs=inputs,
                        calibration=[(torch.zeros(1, 8, 8, 3, dtype=torch.uint8),)])


def test_unknown_outputs_value():
    with pytest.raises(ConfigError, match=r"unknown outputs 'int4'; choose one of: float, int8"):
        mcu_npu.compile(ImageNet(), torch.zeros(1, 3, 8, 8), target="corstone-300",
                        outputs="int4", calibration=[(torch.zeros(1, 3, 8, 8),)])


# --- the command line --------------------------------------------------------------------------
MODEL_FILE = """
import torch
from torch import nn


class ImageNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.c1(x)).mean((2, 3)))


def factory():
    g = torch.Generator().manual_seed(0)
    return ImageNet().eval(), (torch.randint(0, 256, (1, 8, 8, 3), generator=g,
                                              dtype=torch.uint8),)
"""


@pytest.mark.slow
def test_cli_declares_the_input(tmp_path):
    model = tmp_path / "m.py"
    model.write_text(MODEL_FILE)
    out = tmp_path / "m.pte"
    r = run_cli("compile", f"{model}:factory", "--target", "corstone-300",
                "--input-dtype", "uint8", "--input-layout", "channels_last",
                "--input-mean", "123.675,116.28,103.53", "--input-std", "58.395,57.12,57.375",
                "-o", out)
    assert r.returncode == 0, r.stderr
    loaded = mcu_npu.load(out)
    assert [(s.shape, s.dtype) for s in loaded.input_specs] == [((1, 8, 8, 3), torch.uint8)]
    declared = loaded.report.summary["io"]["inputs"][0]["declared"]
    assert declared == {"dtype": "uint8", "layout": "channels_last",
                        "mean": [123.675, 116.28, 103.53], "std": [58.395, 57.12, 57.375]}
    x = tmp_path / "x.npy"
    np.save(x, np.full((1, 8, 8, 3), 200, np.uint8))
    r = run_cli("run", out, "--input", x)
    assert r.returncode == 0, r.stderr


def test_cli_bad_declaration_is_one_line(tmp_path):
    model = tmp_path / "m.py"
    model.write_text(MODEL_FILE)
    out = tmp_path / "o.pte"
    r = run_cli("compile", f"{model}:factory", "--input-dtype", "uint8", "--input-layout",
                "channels_last", "--input-mean", "1,2", "-o", out)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.strip().splitlines()
             if line.startswith("mcu-npu: error")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "mean has 2 values but the input has 3 channels" in lines[0]
    assert not out.exists()


# --- the report: what the boundary costs, and the declaration that removes it ------------------
@pytest.mark.slow
def test_report_gives_the_boundary_cost_and_the_declaration_that_removes_it():
    model = ImageNet().eval()
    calibration = [(normalised(x, MEAN, STD),) for (x,) in pixels(8, seed=1)]
    prog = mcu_npu.compile(model, calibration[0], target="imxrt700", calibration=calibration)
    lat = prog.report.latency
    rows = [r for r in lat["rows"] if r.get("boundary") == "input 0"]
    assert "quantize" in {r["kind"] for r in rows}  # the float input, on the Cortex-M33
    assert lat["boundary_us"]["input 0"] == pytest.approx(sum(r["us"] for r in rows), abs=1e-2)
    text = str(prog.report)
    assert "program boundary on the CPU (quantize, transpose)" in text
    assert ('inputs={0: InputSpec(dtype="uint8", layout="channels_last", mean=..., std=...)} '
            "(--input-dtype uint8 --input-layout channels_last)") in text
    _, declared, *_ = _compile("uint8-hwc-image", "imxrt700")
    assert "input 0" not in declared.report.latency["boundary_us"]
    assert "InputSpec(" not in str(declared.report)
    assert declared.report.latency["latency_us"] < lat["latency_us"]


class FloorFirst(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(torch.floor(x))


@pytest.mark.parametrize("dtype", ["uint8", "int16"])
def test_input_read_as_float_on_the_cpu_cannot_take_sensor_data(dtype):
    g = torch.Generator().manual_seed(0)
    data = [(torch.randint(0, 256, (1, 3, 8, 8), generator=g).to(getattr(torch, dtype)),)
            for _ in range(2)]
    with pytest.raises(mcu_npu.UnsupportedModelError,
                       match=rf"input 0 \(\w+\) cannot take {dtype} data: aten.floor reads it"):
        mcu_npu.compile(FloorFirst().eval(), data[0], target="corstone-300", calibration=data,
                        inputs=mcu_npu.InputSpec(dtype=dtype))


# --- a normalisation that folds exactly into the input's quantization -------------------------
FOLDED = {  # one mean (an integer) and one std for all channels: real = (x - mean) / std
    "uint8-over-255": (ImageNet, pixels, mcu_npu.InputSpec(
        dtype="uint8", layout="channels_last", std=(255.0,)), 0.0, 255.0),
    "uint8-centred": (ImageNet, pixels, mcu_npu.InputSpec(
        dtype="uint8", layout="channels_last", mean=(128,), std=(64.0,)), 128.0, 64.0),
    "int8-features": (FeatureNet, features, mcu_npu.InputSpec(
        dtype="int8", layout="channels_last", mean=(3,), std=(32.0,)), 3.0, 32.0),
}


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", FOLDED)
def test_per_tensor_normalisation_folds_into_the_input_quantization(case, target):
    net, data, spec, mean, std = FOLDED[case]
    torch.manual_seed(0)
    model = net().eval()
    calibration, held_out = data(16, seed=1), data(8, seed=2)
    prog = mcu_npu.compile(model, calibration[0], target=target, calibration=calibration,
                           inputs=spec)
    # no op normalises: the model's own convolutions only
    convs = sum(isinstance(m, (nn.Conv1d, nn.Conv2d)) for m in model.modules())
    assert [o.op for o in prog.report.ops].count("aten.convolution") == convs
    # the program reads x as (x - mean) / std exactly: quantizing the normalised values with
    # the reported parameters gives back the sensor's numbers
    record = prog.report.summary["io"]["inputs"][0]
    assert (record["dtype"], record["zero_point"]) == (spec.dtype, int(mean))
    assert record["scale"] == pytest.approx(1 / std, rel=1e-6)
    lo, hi = record["quant_min"], record["quant_max"]
    every = torch.arange(lo, hi + 1).to(getattr(torch, spec.dtype))
    assert torch.equal(prog.quantize_inputs((every.double() - mean) / std)[0], every)
    with torch.no_grad():
        want = torch.cat([model(normalised(x, (mean,), (std,))) for (x,) in held_out])
        # the quantized reference takes what the front takes: here the normalised values
        ref = torch.cat([prog.reference(((x.double() - mean) / std).float())[0]
                         for (x,) in held_out])
    got = torch.cat([prog.run(x)[0] for (x,) in held_out])
    host, reference = sqnr_db(want, got), sqnr_db(want, ref)
    assert reference > 25, reference
    assert sqnr_holds(host, reference), (host, reference)
