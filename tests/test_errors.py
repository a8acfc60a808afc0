"""Each user error gets one clear message: in the API as a typed exception, in the CLI as one
line on stderr with exit status 2 and no partial output file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

import mcu_npu
from mcu_npu.errors import ConfigError, InputError, InvalidProgramError, UnsupportedModelError

MODEL_FILE = '''
import torch, torch.nn as nn

class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:          # data-dependent control flow: torch.export cannot capture it
            return x * 2
        return x - 1

def small():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU()).eval(), (torch.randn(1, 1, 6, 6),)

def branchy():
    return Branchy(), (torch.randn(1, 4),)
'''


class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


@pytest.fixture(scope="module")
def small_pte(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU()).eval()
    x = torch.randn(1, 1, 6, 6)
    prog = mcu_npu.compile(model, (x,), npu_compiler="reference", calibration=[(x,)])
    return prog, prog.save(d / "small.pte")


# --- API ----------------------------------------------------------------------------------
def test_unknown_target_lists_valid_ones():
    with pytest.raises(ConfigError, match="unknown target 'imxrt999'.*imxrt700"):
        mcu_npu.compile(nn.Linear(2, 2), (torch.randn(1, 2),), target="imxrt999")


def test_model_export_cannot_capture_says_so():
    with pytest.raises(UnsupportedModelError, match="torch.export could not capture"):
        mcu_npu.compile(Branchy(), (torch.randn(1, 4),), calibration=[(torch.randn(1, 4),)])


def test_calibration_that_does_not_match_the_inputs():
    with pytest.raises(ConfigError, match=r"calibration sample 1, input 0 has shape \(1, 3\)"):
        mcu_npu.compile(nn.Linear(2, 2), (torch.randn(1, 2),),
                        calibration=[(torch.randn(1, 2),), (torch.randn(1, 3),)])


def test_missing_and_corrupt_programs(tmp_path):
    with pytest.raises(InvalidProgramError, match="not found"):
        mcu_npu.load(tmp_path / "nope.pte")
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(InvalidProgramError):
        mcu_npu.load(bad)


def test_truncated_program(small_pte, tmp_path):
    _, path = small_pte
    cut = tmp_path / "cut.pte"
    cut.write_bytes(Path(path).read_bytes()[:200])
    with pytest.raises(InvalidProgramError):
        mcu_npu.load(cut).run(torch.randn(1, 1, 6, 6))


def test_run_with_wrong_shape_or_dtype(small_pte):
    prog, _ = small_pte
    with pytest.raises(InputError, match="shape"):
        prog.run(torch.randn(1, 1, 7, 7))
    with pytest.raises(InputError, match="dtype"):
        prog.run(torch.zeros(1, 1, 6, 6, dtype=torch.int32))


# --- CLI ----------------------------------------------------------------------------------
def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "mcu_npu.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


def assert_one_line_error(result, pattern):
    assert result.returncode == 2, result.stderr
    lines = [l for l in result.stderr.strip().splitlines() if l.startswith("mcu-npu:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert pattern in lines[0], lines[0]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    (d / "models.py").write_text(MODEL_FILE)
    return d / "models.py"


def test_cli_unknown_target(model_file, tmp_path):
    out = tmp_path / "o.pte"
    r = cli("compile", f"{model_file}:small", "--target", "nope", "-o", out)
    assert_one_line_error(r, "unknown target 'nope'")
    assert not out.exists()


def test_cli_export_failure(model_file, tmp_path):
    out = tmp_path / "o.pte"
    r = cli("compile", f"{model_file}:branchy", "-o", out)
    assert_one_line_error(r, "torch.export could not capture")
    assert not out.exists() and not list(tmp_path.iterdir())


def test_cli_calibration_mismatch(model_file, tmp_path):
    cal = tmp_path / "cal.npz"
    np.savez(cal, np.zeros((4, 1, 5, 5), np.float32))
    out = tmp_path / "o.pte"
    r = cli("compile", f"{model_file}:small", "--calibration", cal, "-o", out)
    assert_one_line_error(r, "calibration array 0 has shape (4, 1, 5, 5)")
    assert not out.exists()


def test_cli_missing_and_corrupt_pte(tmp_path):
    assert_one_line_error(cli("report", tmp_path / "none.pte"), "not found")
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"garbage" * 10)
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 1, 6, 6), np.float32))
    assert_one_line_error(cli("run", bad, "--input", x), "mcu-npu: error")


def test_cli_run_wrong_input_writes_nothing(small_pte, tmp_path):
    _, path = small_pte
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 1, 5, 5), np.float32))
    out = tmp_path / "y.npy"
    r = cli("run", path, "--input", x, "--output", out)
    assert_one_line_error(r, "shape")
    assert not out.exists()


def test_cli_compile_run_report_round_trip(model_file, tmp_path):
    out = tmp_path / "small.pte"
    cal = tmp_path / "cal.npz"
    np.savez(cal, np.random.default_rng(0).standard_normal((8, 1, 1, 6, 6)).astype(np.float32))
    r = cli("compile", f"{model_file}:small", "--calibration", cal, "--npu-compiler",
            "reference", "-o", out)
    assert r.returncode == 0, r.stderr
    assert "NPU partition 0" in r.stdout and out.exists()
    x = tmp_path / "x.npy"
    np.save(x, np.ones((1, 1, 6, 6), np.float32))
    y = tmp_path / "y.npy"
    r = cli("run", out, "--input", x, "--output", y)
    assert r.returncode == 0, r.stderr
    assert np.load(y).shape == (1, 4, 4, 4)
    r = cli("report", out)
    assert r.returncode == 0 and "aten.convolution" in r.stdout and "NPU partition 0" in r.stdout
    r = cli("targets")
    assert r.returncode == 0 and "imxrt700" in r.stdout
