"""Quantized program I/O (``compile(..., io="int8")``, ``mcu-npu compile --io int8``): the
program takes and returns the int8 tensors the NPU consumes and produces, and the report
gives each one's scale and zero point.

Exactness: an int8-I/O program and the float-I/O program compiled from the same model and
calibration hold the same quantization parameters and the same NPU payload / Cortex-M
kernels; they differ only in where the boundary quantize/dequantize runs. The host quantizes
the float samples with the very op the program's own quantize kernel runs
(``quantized_decomposed.quantize_per_tensor``; ``cortex_m::quantize_per_tensor`` calls it on
the host) with the same double-precision parameters, so the int8 tensors entering the
program are bit-identical, and so are its int8 outputs; dequantizing them with the reported
parameters is again the program's own op. The comparisons below are therefore exact
(``torch.equal``), not within an output step.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

import mcu_npu
from helpers import assert_loads_in_executorch, run_cli
from mcu_npu.flow.serialize import to_executorch
from mcu_npu.errors import ConfigError, UnsupportedModelError
from mcu_npu.passes.edge import RemoveInputQuantize, RemoveOutputDequantize
from mcu_npu.report import Kernel
from mcu_npu.runtime import load_program

ROOT = Path(__file__).resolve().parent.parent
IO_KERNELS = {"quantized_decomposed::quantize_per_tensor",
              "quantized_decomposed::dequantize_per_tensor",
              "cortex_m::quantize_per_tensor", "cortex_m::dequantize_per_tensor"}


def small_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 4 * 4, 5)).eval()


def samples(n: int = 6, seed: int = 1) -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(1, 1, 6, 6, generator=g),) for _ in range(n)]


def compile_both(model, example, calibration, **kwargs):
    """(float-I/O program, int8-I/O program) of the same model, calibration and options."""
    return (mcu_npu.compile(model, example, calibration=calibration, **kwargs),
            mcu_npu.compile(model, example, calibration=calibration, io="int8", **kwargs))


def assert_int8_program(prog, shapes_in, shapes_out):
    specs = mcu_npu.load(prog.buffer).input_specs
    assert [(s.shape, s.dtype) for s in specs] == [(s, torch.int8) for s in shapes_in]
    io = prog.report.summary["io"]
    assert [tuple(t["shape"]) for t in io["inputs"]] == list(shapes_in)
    assert [tuple(t["shape"]) for t in io["outputs"]] == list(shapes_out)
    for t in io["inputs"] + io["outputs"]:
        assert t["dtype"] == "int8" and t["scale"] > 0
        assert -128 <= t["zero_point"] <= 127 and (t["quant_min"], t["quant_max"]) == (-128, 127)
    used = set(load_program(prog.buffer).operator_names)
    assert not used & IO_KERNELS, used & IO_KERNELS


def assert_same_results(float_prog, int8_prog, data):
    for s in data:
        q = int8_prog.quantize_inputs(*s)
        assert all(x.dtype == torch.int8 for x in q)
        raw = int8_prog.run(*q)
        assert all(y.dtype == torch.int8 for y in raw)
        got, want = int8_prog.dequantize_outputs(raw), float_prog.run(*s)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert torch.equal(g, w), float((g - w).abs().max())


# --- option checking ------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["int4", "INT8", "", None])
def test_unknown_io_names_the_valid_values(bad):
    with pytest.raises(ConfigError, match=r"unknown io .*choose one of: float, int8"):
        mcu_npu.compile(small_net(), samples(1)[0], io=bad)


# --- a small conv net on an Ethos-U and on the i.MX RT700 (Neutron + Cortex-M) ---------------
@pytest.fixture(scope="module", params=["ethos-u55-128", "imxrt700"])
def small_programs(request):
    data = samples()
    return request.param, data, *compile_both(small_net(), data[0], data, target=request.param)


def test_int8_io_program_takes_and_returns_int8(small_programs):
    _, data, float_prog, int8_prog = small_programs
    assert_int8_program(int8_prog, [(1, 1, 6, 6)], [(1, 5)])
    # the float-I/O program does quantize its input and dequantize its output on the CPU
    assert mcu_npu.load(float_prog.buffer).input_specs[0].dtype == torch.float32
    assert set(load_program(float_prog.buffer).operator_names) & IO_KERNELS
    out = int8_prog.run(torch.zeros(1, 1, 6, 6, dtype=torch.int8))
    assert len(out) == 1 and out[0].dtype == torch.int8 and out[0].shape == (1, 5)


def test_int8_outputs_dequantized_equal_the_float_io_program(small_programs):
    _, data, float_prog, int8_prog = small_programs
    assert_same_results(float_prog, int8_prog, data)
    # accuracy is measured through the reported qparams and comes out as for float I/O
    assert int8_prog.report.accuracy == float_prog.report.accuracy
    assert int8_prog.report.accuracy["sqnr_db"] > 30


def test_report_gives_the_qparams(small_programs):
    _, data, float_prog, int8_prog = small_programs
    io = int8_prog.report.summary["io"]
    assert io["mode"] == "int8" and io["inputs"][0]["name"] == "input"
    x = data[0][0]  # the reported input qparams are what the program quantizes with
    scale, zp = io["inputs"][0]["scale"], io["inputs"][0]["zero_point"]
    manual = torch.clamp(torch.round(x / scale) + zp, -128, 127).to(torch.int8)
    assert (manual.int() - int8_prog.quantize_inputs(x)[0].int()).abs().max() <= 1
    text = str(int8_prog.report)
    assert "program I/O int8" in text and "zero_point" in text
    assert f"{scale:.9g}" in text and f"{io['outputs'][0]['scale']:.9g}" in text
    # saved with the program: `mcu-npu report` and a loaded program see the same
    loaded = mcu_npu.load(int8_prog.buffer, companion=int8_prog.companion)
    assert loaded.report.summary["io"] == io
    assert torch.equal(loaded.dequantize_outputs(loaded.run(*loaded.quantize_inputs(x)))[0],
                       float_prog.run(x)[0])
    # float I/O: no io section, nothing to convert
    assert "io" not in float_prog.report.summary and "program I/O" not in str(float_prog.report)
    assert float_prog.quantize_inputs(x)[0] is x


# --- first / last op on the Cortex-M rather than the NPU ------------------------------------
@pytest.mark.parametrize("excluded, kernel", [("aten.convolution", "cortex_m::quantized_"),
                                              ("aten.linear", "cortex_m::quantized_linear")])
def test_imxrt700_first_or_last_op_on_the_cortex_m(excluded, kernel):
    data = samples(4)
    float_prog, int8_prog = compile_both(small_net(), data[0], data, target="imxrt700",
                                         operators_not_to_delegate=[excluded])
    ops = {o.op: o for o in int8_prog.report.ops}
    assert ops[excluded].kernel is Kernel.CORTEX_M
    assert any(name.startswith(kernel) for name in load_program(int8_prog.buffer).operator_names)
    assert_int8_program(int8_prog, [(1, 1, 6, 6)], [(1, 5)])
    assert_same_results(float_prog, int8_prog, data)


# --- inputs/outputs that cannot be int8 -----------------------------------------------------
class FloorFirst(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)

    def forward(self, x):
        return self.conv(torch.floor(x))


class FloorLast(FloorFirst):
    def forward(self, x):
        return torch.floor(self.conv(x))


@pytest.mark.parametrize("target", ["ethos-u55-128", "imxrt700"])
def test_float_first_op_says_which_input_cannot_be_int8(target):
    data = samples(2)
    with pytest.raises(UnsupportedModelError,
                       match=r"input 0 \(x\) cannot be int8: aten.floor reads it as float"):
        mcu_npu.compile(FloorFirst().eval(), data[0], target=target, calibration=data, io="int8")


def test_float_last_op_says_which_output_cannot_be_int8():
    data = samples(2)
    with pytest.raises(UnsupportedModelError,
                       match=r"output 0 cannot be int8: aten.floor makes it in float"):
        mcu_npu.compile(FloorLast().eval(), data[0], target="ethos-u55-128", calibration=data,
                        io="int8")


# --- the passes on hand-made Edge programs --------------------------------------------------
def _edge_of(fn, x):
    import torch.ao.quantization.fx._decomposed  # noqa: F401
    from executorch.exir import EdgeCompileConfig, to_edge

    class M(nn.Module):
        def forward(self, x):
            return fn(x)

    ep = torch.export.export(M(), (x,))
    return to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False))


def _twice_quantized(second_scale):
    qd = torch.ops.quantized_decomposed

    def fn(x):
        a = qd.dequantize_per_tensor(qd.quantize_per_tensor(x, 0.05, 3, -128, 127, torch.int8),
                                     0.05, 3, -128, 127, torch.int8)
        b = qd.dequantize_per_tensor(qd.quantize_per_tensor(x, second_scale, 3, -128, 127,
                                                            torch.int8),
                                     second_scale, 3, -128, 127, torch.int8)
        y = qd.quantize_per_tensor(a + b, 0.1, -2, -128, 127, torch.int8)
        return (qd.dequantize_per_tensor(y, 0.1, -2, -128, 127, torch.int8),
                torch.argmax(a, dim=-1))
    return fn


def _count(program, op: str) -> int:
    return sum(n.op == "call_function" and f".{op}." in str(n.target)
               for n in program.graph.nodes)


def test_input_read_by_several_quantizes_with_the_same_params():
    x = torch.randn(2, 8)
    edge = _edge_of(_twice_quantized(0.05), x)
    expected = edge.exported_program().module()(x)
    program = edge.exported_program()
    assert _count(program, "quantize_per_tensor") == 3  # x twice, a + b once
    assert _count(program, "dequantize_per_tensor") == 3
    inputs, outputs = RemoveInputQuantize(), RemoveOutputDequantize()
    assert inputs(program).modified and outputs(program).modified
    assert _count(program, "quantize_per_tensor") == 1  # a + b's: not program I/O
    assert _count(program, "dequantize_per_tensor") == 2
    assert list(program.graph_signature.user_outputs) == \
        [n.name for n in program.graph.output_node().args[0]]
    program.validate()
    assert [(r.scale, r.zero_point) for r in inputs.inputs] == [(0.05, 3)]
    # the int64 argmax output stays as it is, recorded without qparams
    assert [(r.dtype, r.scale) for r in outputs.outputs] == [(torch.int8, 0.1),
                                                            (torch.int64, None)]
    prog = load_program(*to_executorch(edge))
    assert [s.dtype for s in prog.input_specs] == [torch.int8]
    xq = torch.ops.quantized_decomposed.quantize_per_tensor(x, 0.05, 3, -128, 127, torch.int8)
    y, idx = prog.run(xq)
    assert y.dtype == torch.int8 and torch.equal(idx, expected[1])
    assert torch.equal(torch.ops.quantized_decomposed.dequantize_per_tensor(
        y, 0.1, -2, -128, 127, torch.int8), expected[0])


def test_input_quantized_with_different_params_cannot_be_int8():
    edge = _edge_of(_twice_quantized(0.07), torch.randn(2, 8))
    program = edge.exported_program()
    before = str(program.graph)
    name = program.graph_signature.user_inputs[0]  # export names it (x, or args_0)
    with pytest.raises(UnsupportedModelError,
                       match=rf"input 0 \({name}\) cannot be int8: its readers quantize it "
                             r"with 2 different parameters"):
        RemoveInputQuantize()(program)
    assert str(program.graph) == before  # nothing rewritten


# --- the digits example ---------------------------------------------------------------------
def load_digits():
    name = "example_digits"  # the name tests/test_examples.py imports it under
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "digits.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


@pytest.mark.slow
def test_digits_int8_io_matches_float_io_on_imxrt700():
    digits = load_digits()
    model, example, calibration = digits.calibrated()
    float_prog, int8_prog = compile_both(model, example, calibration, target="imxrt700")
    assert_int8_program(int8_prog, [(1, 1, 8, 8)], [(1, 10)])
    q = torch.zeros(1, 1, 8, 8, dtype=torch.int8)
    assert_loads_in_executorch(int8_prog.buffer, (q,), int8_prog.run(q))
    images, _ = digits.held_out()
    assert_same_results(float_prog, int8_prog, [(images[i:i + 1],) for i in range(32)])
    # images in [0, 1]: the input quantization is the 8-bit grey scale
    x = int8_prog.report.summary["io"]["inputs"][0]
    assert (x["scale"], x["zero_point"]) == pytest.approx((1 / 255, -128))


cli = run_cli


def test_cli_bad_io_value_is_one_line_and_writes_nothing(tmp_path):
    model = tmp_path / "m.py"
    model.write_text("import torch\n"
                     "def f():\n"
                     "    raise SystemExit('the model must not load before --io is checked')\n")
    out = tmp_path / "o.pte"
    r = cli("compile", f"{model}:f", "--io", "int4", "-o", out)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.strip().splitlines() if line.startswith("mcu-npu:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "unknown io 'int4'; choose one of: float, int8" in lines[0]
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["m.py"]


@pytest.mark.slow
def test_cli_compile_io_int8_on_digits(tmp_path):
    out = tmp_path / "digits.pte"
    r = cli("compile", ROOT / "examples" / "digits.py:calibrated", "--target", "ethos-u55-128",
            "--io", "int8", "-o", out)
    assert r.returncode == 0, r.stderr
    assert "program I/O int8" in r.stdout and "zero_point" in r.stdout
    ptd = tmp_path / "digits.ptd"  # both files, with their sizes
    assert f"wrote {out} ({out.stat().st_size:,} bytes: the device program" in r.stdout
    assert f"wrote {ptd} ({ptd.stat().st_size:,} bytes: host only" in r.stdout
    loaded = mcu_npu.load(out)
    io = loaded.report.summary["io"]
    assert f"{io['inputs'][0]['scale']:.9g}" in r.stdout
    assert f"{io['outputs'][0]['scale']:.9g}" in r.stdout
    assert [(s.shape, s.dtype) for s in loaded.input_specs] == [((1, 1, 8, 8), torch.int8)]
    assert "program I/O int8" in str(loaded.report)  # what `mcu-npu report` prints
    # `run` takes and gives int8 arrays
    x = tmp_path / "x.npy"
    np.save(x, np.full((1, 1, 8, 8), -128, np.int8))
    y = tmp_path / "y.npy"
    r = cli("run", out, "--input", x, "--output", y)
    assert r.returncode == 0, r.stderr
    assert np.load(y).dtype == np.int8 and np.load(y).shape == (1, 10)
