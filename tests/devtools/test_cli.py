"""``mcu-npu compile --etrecord --bundled --c-header-bundled`` on a tiny model, and its
refusals (one line, exit 2, no file written)."""

from __future__ import annotations

import numpy as np

from executorch.devtools.bundled_program.serialize import \
    deserialize_from_flatbuffer_to_bundled_program
from executorch.devtools.etrecord import parse_etrecord

from helpers import run_cli

MODEL_FILE = """
import torch

def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval(), \\
        (torch.randn(1, 4),)
"""


def test_compile_writes_etrecord_bundle_and_bundled_header(tmp_path):
    (tmp_path / "tiny.py").write_text(MODEL_FILE)
    np.savez(tmp_path / "inputs.npz", np.random.default_rng(0).standard_normal(
        (3, 1, 4)).astype(np.float32))
    done = run_cli("compile", f"{tmp_path / 'tiny.py'}:make", "--target", "corstone-300",
                   "-o", tmp_path / "tiny.pte", "--etrecord", tmp_path / "tiny.etrecord",
                   "--bundled", tmp_path / "inputs.npz", "--c-header", tmp_path / "tiny.h",
                   "--c-header-bundled")
    assert done.returncode == 0, done.stderr
    assert parse_etrecord(str(tmp_path / "tiny.etrecord"))._delegate_map["forward"]
    bpte = (tmp_path / "tiny.bpte").read_bytes()
    bundle = deserialize_from_flatbuffer_to_bundled_program(bpte)
    assert bytes(bundle.program) == (tmp_path / "tiny.pte").read_bytes()
    assert len(bundle.method_test_suites[0].test_cases) == 3
    assert "#define MODEL_PTE_BUNDLED_TEST_CASES 3" in (tmp_path / "tiny.h").read_text()
    assert "wrote " + str(tmp_path / "tiny.bpte") in done.stdout and "atol" in done.stdout
    assert run_cli("check", tmp_path / "tiny.bpte", "--bundled").returncode == 0


def test_refusals_write_nothing(tmp_path):
    (tmp_path / "tiny.py").write_text(MODEL_FILE)
    alone = run_cli("compile", f"{tmp_path / 'tiny.py'}:make", "--target", "corstone-300",
                    "-o", tmp_path / "tiny.pte", "--c-header", tmp_path / "tiny.h",
                    "--c-header-bundled")
    assert alone.returncode == 2
    assert alone.stderr.strip().count("\n") == 0 and "--bundled INPUTS.npz" in alone.stderr
    np.savez(tmp_path / "bad.npz", np.zeros((2, 1, 5), np.float32))
    bad = run_cli("compile", f"{tmp_path / 'tiny.py'}:make", "--target", "corstone-300",
                  "-o", tmp_path / "tiny.pte", "--bundled", tmp_path / "bad.npz")
    assert bad.returncode == 2 and "bundled inputs array 0 has shape" in bad.stderr
    no_target = run_cli("check", tmp_path / "tiny.pte")
    assert no_target.returncode == 2 and "--target" in no_target.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.npz", "tiny.py"]
