"""Each user error gets one clear message: in the API as a typed exception, in the CLI as one
line on stderr with exit status 2 and no partial output file. A failure inside ExecuTorch or
torch during ``compile`` is an ``McuNpuError`` too, naming the stage, the node and op, with
the original exception chained and a line saying what to do."""

from __future__ import annotations

import inspect
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from helpers import assert_warned_at, run_cli
import mcu_npu
from mcu_npu.errors import (ConfigError, InputError, InvalidProgramError, McuNpuError,
                            NpuCompilerError, UnsupportedModelError, stage)

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

def conv1d_no_batch():
    torch.manual_seed(0)
    return nn.Conv1d(3, 4, 3).eval(), (torch.randn(3, 16),)

def float64():
    torch.manual_seed(0)
    return nn.Linear(8, 4).double().eval(), (torch.randn(2, 8, dtype=torch.float64),)
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


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_saved_files_get_the_permissions_a_new_file_gets(small_pte, tmp_path, umask):
    """Written whole through a temporary file, yet with the permissions ``open`` gives a
    new file, not the temporary file's owner-only ones."""
    prog, _ = small_pte
    old = os.umask(umask)
    try:
        pte = prog.save(tmp_path / "m.pte")
        header = prog.save_c_header(tmp_path / "m.h")
    finally:
        os.umask(old)
    for path in (pte, pte.with_suffix(".ptd"), header):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.h", "m.ptd", "m.pte"]


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


def test_calibration_sample_that_is_not_an_array():
    with pytest.raises(ConfigError, match="calibration sample 0, input 0 is not a tensor"):
        mcu_npu.compile(nn.Linear(2, 2), (torch.randn(1, 2),), calibration=[("text",)])


# --- failures inside ExecuTorch / torch ---------------------------------------------------
class Where(nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x, x * 2)


class CeilPool(nn.Module):
    def forward(self, x):
        return nn.functional.max_pool2d(x, 3, 2, ceil_mode=True)


def test_cortex_m_lowering_failure_names_stage_node_op_and_source_line(monkeypatch):
    """With upstream's own explicit-layout pass list (its final validation refuses any
    pooling left un-lowered), a ceil-mode max pool, which the plan leaves to a portable
    kernel, fails inside ExecuTorch. The compile goes on with the CPU ops on portable
    kernels, and the report's reason names the stage, the node, the op, the model line it
    came from and ExecuTorch's error."""
    from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager

    import mcu_npu.backend.cortex_m
    from mcu_npu.report import Kernel

    monkeypatch.setattr(mcu_npu.backend.cortex_m, "_lowering_passes",
                        lambda: list(CortexMPassManager.explicit_layout_pass_list))
    x = torch.randn(1, 3, 9, 9)
    prog = mcu_npu.compile(CeilPool(), (x,), target="imxrt700", calibration=[(x,)],
                           npu_compiler="reference", operators_not_to_delegate=["*"])
    (pool,) = prog.report.ops
    assert pool.kernel is Kernel.PORTABLE
    why = pool.reason.split("; ", 2)[2]  # after the exclusion and the planned reason
    source = "test_errors.py:" + str(CeilPool.forward.__code__.co_firstlineno + 1) + \
        " (return nn.functional.max_pool2d(x, 3, 2, ceil_mode=True))"
    assert why.startswith("lowering to the Cortex-M kernels failed at node 'max_pool2d' "
                          "(aten.max_pool2d), from "), why
    assert source in why
    assert ": RuntimeError: Cortex-M explicit layout" in why
    assert "schema" not in why  # ExecuTorch's op schema shortened to the op's name
    torch.testing.assert_close(prog.run(x)[0], nn.functional.max_pool2d(x, 3, 2, ceil_mode=True),
                               atol=float(x.abs().max()) / 127, rtol=0)


def test_where_next_to_an_npu_node_compiles():
    """A ``where`` and its comparison stay on the CPU with no Cortex-M kernel: they run as
    portable kernels (the Cortex-M shared-quantization rule, which made torchao's prepare
    recurse without end next to the NPU's mul, is kept off them)."""
    x = torch.randn(2, 8)
    for target in ("imxrt700", "corstone-300"):
        prog = mcu_npu.compile(Where(), (x,), target, calibration=[(x,)])
        ops = {o.op: o for o in prog.report.ops}
        assert ops["aten.mul.Tensor"].placement.startswith("NPU")
        assert ops["aten.where.self"].reason.endswith("the Cortex-M kernels have no where.self")
        want = prog.reference(x)
        step = float([n for n in prog.reference.graph.nodes
                      if "dequantize_per_tensor" in str(n.target)][-1].args[1])
        assert float((prog.run(x)[0] - want).abs().max()) <= step + 1e-6


def test_edge_conversion_failure_names_the_quantize_node():
    """float64 inputs: torch's quantize_per_tensor refuses them when the quantized model is
    re-traced for the Edge dialect."""
    x = torch.randn(2, 8, dtype=torch.float64)
    with pytest.raises(UnsupportedModelError,
                       match=r"^converting the quantized model to the Edge dialect failed at node "
                             r"'quantize_per_tensor_default' \(quantized_decomposed"
                             r"\.quantize_per_tensor\): AssertionError: Expecting input to have "
                             r"dtype torch.float32") as info:
        mcu_npu.compile(nn.Linear(8, 4).double().eval(), (x,), calibration=[(x,)],
                        npu_compiler="reference")
    assert isinstance(info.value.__cause__, AssertionError)


def test_failure_in_train_fn_is_named_as_such():
    def train_fn(gm):
        raise ValueError("optimizer diverged")

    x = torch.randn(1, 4)
    with pytest.raises(UnsupportedModelError, match=r"^quantization-aware training failed: "
                       r"ValueError: optimizer diverged\nTo work around it: the exception came "
                       r"from train_fn") as info:
        mcu_npu.compile(nn.Linear(4, 2), (x,), calibration=[(x,)], train_fn=train_fn,
                        npu_compiler="reference")
    assert isinstance(info.value.__cause__, ValueError)


def test_stage_passes_mcu_npu_errors_and_wraps_the_rest():
    original = NpuCompilerError("Vela failed", tool="vela")
    with pytest.raises(NpuCompilerError) as info:
        with stage("delegating to the NPU"):
            raise original
    assert info.value is original
    with pytest.raises(UnsupportedModelError, match=r"^serializing failed: KeyError: 'x'\n"
                       r"To work around it: report it") as info:
        with stage("serializing"):
            {}["x"]
    assert isinstance(info.value.__cause__, KeyError)
    with pytest.raises(ConfigError, match="^reading failed: ValueError\nTo work around it: report"):
        with stage("reading", error=ConfigError):
            raise ValueError()


def test_stage_finds_the_node_torch_fx_was_running():
    class Project(nn.Module):
        def forward(self, x):
            return torch.relu(x) @ torch.ones(4, 5)

    gm = torch.export.export(Project(), (torch.randn(2, 4),)).module(check_guards=False)
    with pytest.raises(UnsupportedModelError) as info:  # the interpreter's note names it
        with stage("running the graph"):
            torch.fx.Interpreter(gm).run(torch.randn(2, 3))
    assert (info.value.node, info.value.op) == ("matmul", "aten.matmul")

    def visit(graph):
        for node in graph.nodes:
            if node.op == "call_function" and node.target == torch.ops.aten.relu.default:
                raise TypeError("no rule for relu")

    with pytest.raises(UnsupportedModelError, match=r"^checking failed at node 'relu' "
                       r"\(aten.relu\), from .*test_errors.py:\d+ \(return torch.relu\(x\) @ "
                       r"torch.ones\(4, 5\)\): TypeError: no rule for relu\n.*keep aten.relu off") as info:
        with stage("checking", lambda op: f"keep {op} off the NPU"):
            visit(gm.graph)  # the innermost frame holding a ``node`` names it


def test_fold_select_of_cat_leaves_an_index_outside_the_cat():
    from mcu_npu.passes.aten import FoldSelectOfCat

    class LastOfTwo(nn.Module):
        def forward(self, a, b):
            return torch.cat([a.unsqueeze(1), b.unsqueeze(1)], 1)[:, 1]

    args = (torch.randn(2, 3), torch.randn(2, 3))
    gm = torch.export.export(LastOfTwo(), args).module()
    select = next(n for n in gm.graph.nodes if n.target == torch.ops.aten.select.int)
    select.args = (*select.args[:2], 5)  # beyond the cat's 2 steps
    assert not FoldSelectOfCat()(gm).modified
    select.args = (*select.args[:2], -1)
    assert FoldSelectOfCat()(gm).modified


# --- CLI ----------------------------------------------------------------------------------
cli = run_cli  # in process; the tests marked "entry point" run ``python -m mcu_npu.cli``


def assert_one_line_error(result, pattern):
    assert result.returncode == 2, result.stderr
    # warnings about the arguments (no calibration data) come before the work, so before it fails
    lines = [l for l in result.stderr.strip().splitlines()
             if l.startswith("mcu-npu:") and not l.startswith("mcu-npu: warning:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert pattern in lines[0], lines[0]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    (d / "models.py").write_text(MODEL_FILE)
    return d / "models.py"


def test_cli_unknown_target(model_file, tmp_path):
    """Through the entry point itself: the exit code and the one line a shell sees."""
    out = tmp_path / "o.pte"
    r = cli("compile", f"{model_file}:small", "--target", "nope", "-o", out, in_process=False)
    assert_one_line_error(r, "unknown target 'nope'")
    assert not out.exists()


def test_cli_export_failure(model_file, tmp_path):
    out = tmp_path / "o.pte"
    r = cli("compile", f"{model_file}:branchy", "-o", out)
    assert_one_line_error(r, "torch.export could not capture")
    assert not out.exists() and not list(tmp_path.iterdir())


def test_cli_failure_inside_executorch(model_file, tmp_path):
    out = tmp_path / "o.pte"
    r = cli("compile", f"{model_file}:float64", "--npu-compiler", "reference", "-o", out)
    assert_one_line_error(r, "mcu-npu: error: converting the quantized model to the Edge "
                             "dialect failed at node 'quantize_per_tensor_default'")
    assert not out.exists() and not list(tmp_path.iterdir())


def test_cli_conv1d_without_batch_compiles(model_file, tmp_path):
    out = tmp_path / "o.pte"
    r = cli("compile", f"{model_file}:conv1d_no_batch", "--npu-compiler", "reference", "-o", out)
    assert r.returncode == 0, r.stderr
    assert out.exists()


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


# --- warnings name the user's line ------------------------------------------------------------
def test_a_warning_from_deep_in_the_flow_names_the_line_that_called_compile():
    """The missing-calibration warning is raised by the flow's argument check, several calls
    below ``compile``: it names this file and the line of the call (``errors.warn_user``), as
an ``McuNpuWarning`` (a ``UserWarning``) a user's filter can name."""
    model = nn.Sequential(nn.Linear(4, 3)).eval()
    x = torch.randn(1, 4, generator=torch.Generator().manual_seed(0))
    with pytest.warns(mcu_npu.McuNpuWarning, match="no calibration data") as caught:
        line = inspect.currentframe().f_lineno + 1
        mcu_npu.compile(model, (x,), target="corstone-300")
    assert_warned_at(caught, "no calibration data", __file__, line)


def test_warn_user_names_the_frame_outside_the_outermost_mcu_npu_frame():
    """A call from outside the package into it, then out again (a user ``forward`` the flow
    runs) and back in: the warning names the first call, not the frames between."""
    import mcu_npu.errors as errors

    space = {}  # a function whose frames are the package's (its file is in the package)
    exec(compile("def run(fn):\n    return fn()\n",
                 os.path.join(os.path.dirname(errors.__file__), "calls_back.py"), "exec"), space)

    def user_forward():  # a frame outside the package, run by the package
        errors.warn_user("deep")

    with pytest.warns(UserWarning, match="deep") as caught:
        line = inspect.currentframe().f_lineno + 1
        space["run"](user_forward)
    assert_warned_at(caught, "deep", __file__, line)
