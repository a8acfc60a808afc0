"""The command line as a user meets it: a ``.pt2`` compiles (CLI and API), a compile shows
its stages with elapsed time and none of the third-party notices nobody can act on, the
no-calibration warning comes before the work, ``report``, ``check``, ``targets`` and
``--version`` load neither torch nor ExecuTorch, and ``--help`` states the defaults."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import mcu_npu
from helpers import run_cli, sqnr_holds

NOISE = ("Failed to load", "_C_mxfp8", "is an Enum subclass", "PassManager is deprecated",
         "LeafSpec", "FutureWarning", "DeprecationWarning")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(144, 3)).eval()


@pytest.fixture(scope="module")
def pt2(tmp_path_factory):
    """A .pt2 saved by torch.export.save and an .npz of 8 calibration samples for it."""
    out = tmp_path_factory.mktemp("pt2")
    x = torch.randn(1, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    torch.export.save(torch.export.export(_model(), (x,)), out / "m.pt2")
    samples = torch.randn(8, 1, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    np.savez(out / "cal.npz", samples.numpy())
    return out


@pytest.fixture(scope="module")
def cli_compile(pt2):
    """``mcu-npu compile m.pt2 --calibration cal.npz`` in a fresh process (stderr not a
    terminal): the finished process and the .pte it wrote."""
    pte = pt2 / "m.pte"
    done = run_cli("compile", pt2 / "m.pt2", "--target", "corstone-300", "--calibration",
                   pt2 / "cal.npz", "-o", pte, in_process=False)
    return done, pte


def test_pt2_compiles_from_the_command_line_with_progress_and_no_noise(cli_compile):
    done, pte = cli_compile
    assert done.returncode == 0, done.stderr
    stages = re.findall(r"^\[\s*(\d+\.\d) s\] (.+)$", done.stderr, re.M)
    names = [name for _, name in stages]
    for expected in ("loading PyTorch and ExecuTorch", "exporting the model",
                     "quantizing and calibrating", "serializing the ExecuTorch program",
                     "done"):
        assert expected in names, done.stderr
    seconds = [float(t) for t, _ in stages]
    assert seconds == sorted(seconds) and names[-1] == "done"
    assert "\r" not in done.stderr  # not a terminal: plain lines, no bar
    for noise in NOISE:
        assert noise not in done.stderr, done.stderr
    prog = mcu_npu.load(pte)
    assert sqnr_holds(prog.report.accuracy["sqnr_db"], prog.report.accuracy["reference_sqnr_db"])


def test_pt2_compiles_through_the_api_warning_before_the_work(pt2, capfd):
    program = torch.export.load(pt2 / "m.pt2")
    calibration = [(torch.from_numpy(s),) for s in np.load(pt2 / "cal.npz")["arr_0"]]
    prog = mcu_npu.compile(program, None, "corstone-300", calibration=calibration,
                           progress=False)
    assert sqnr_holds(prog.report.accuracy["sqnr_db"], prog.report.accuracy["reference_sqnr_db"])
    x = program.example_inputs[0][0]
    assert prog.run(x)[0].shape == program.module()(x).shape
    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda m, *a, **k: print(f"warning: {m}", file=sys.stderr)
        by_path = mcu_npu.compile(str(pt2 / "m.pt2"), target="corstone-300", progress=True)
    err = capfd.readouterr().err
    assert err.index("warning: no calibration data") < err.index("exporting the model"), err
    assert by_path.report.summary["ops_on_npu"] == prog.report.summary["ops_on_npu"]


def test_a_pt2_without_a_program_is_refused_in_one_line(tmp_path):
    (tmp_path / "bad.pt2").write_bytes(b"not a zip")
    done = run_cli("compile", tmp_path / "bad.pt2", "--target", "corstone-300",
                   "-o", tmp_path / "m.pte")
    errors = [line for line in done.stderr.splitlines() if line.startswith("mcu-npu:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr
    assert "cannot read" in errors[0] and not (tmp_path / "m.pte").exists()


QUICK = [["targets"], ["--version"], ["report", "{pte}"], ["report", "{pte}", "--json"]]


def run_fresh(*argv) -> tuple[subprocess.CompletedProcess, str, str]:
    """``mcu-npu *argv`` in a fresh interpreter: the process, what it printed, and which of
    torch, ExecuTorch and torchao it had imported by the end."""
    code = ("import sys\n"
            "from mcu_npu.cli import main\n"
            "try:\n"
            "    code = main(sys.argv[1:])\n"
            "except SystemExit as e:\n"
            "    code = e.code\n"
            "print('IMPORTED', sorted(m for m in ('torch', 'executorch', 'torchao') "
            "if m in sys.modules))\n"
            "sys.exit(code or 0)\n")
    done = subprocess.run([sys.executable, "-c", code, *map(str, argv)],
                          capture_output=True, text=True, timeout=120)
    printed, imported = done.stdout.rsplit("IMPORTED ", 1)
    return done, printed, imported.strip()


@pytest.mark.parametrize("argv", QUICK, ids=" ".join)
def test_quick_commands_import_neither_torch_nor_executorch(argv, cli_compile):
    _, pte = cli_compile
    done, printed, imported = run_fresh(*(a.format(pte=pte) for a in argv))
    assert done.returncode == 0, done.stderr
    assert imported == "[]", imported
    if argv[0] == "report":  # the same report the full load gives
        report = mcu_npu.load(pte).report
        assert printed.strip() == (report.to_json() if "--json" in argv else str(report)).strip()


def test_check_imports_neither_torch_nor_executorch(cli_compile, tmp_path):
    """``check`` reads the .pte with the flatbuffers runtime alone and says what it said
    when it loaded the program with ExecuTorch: nothing on the board the program was compiled
    for, one line per problem (exit 1) elsewhere or on a program calling a missing kernel."""
    _, pte = cli_compile
    data = pte.read_bytes()
    assert data.count(b"cortex_m::quantize_per_tensor") == 1
    broken = tmp_path / "broken.pte"  # an operator name no kernel library has, same length
    broken.write_bytes(data.replace(b"cortex_m::quantize_per_tensor",
                                    b"cortex_m::quantize_per_tensoX"))
    kernel = ("cortex_m.quantize_per_tensoX: no kernel for cortex_m::quantize_per_tensoX.out "
              "on {t}: the ExecuTorch Cortex-M (CMSIS-NN) kernels have no "
              "cortex_m::quantize_per_tensoX.out")
    other_npu = ("delegate 0 (EthosUBackend): target imxrt700 runs NeutronBackend delegates, "
                 "not EthosUBackend")
    for program, target, lines in (
            (pte, "corstone-300", ["no problem found for corstone-300's board"]),
            (pte, "imxrt700", [other_npu]),
            (broken, "corstone-300", [kernel.format(t="corstone-300")]),
            (broken, "imxrt700", [other_npu, kernel.format(t="imxrt700")])):
        done, printed, imported = run_fresh("check", program, "--target", target)
        assert imported == "[]", imported
        assert printed.splitlines() == [f"{program}: {line}" for line in lines], done.stderr
        assert done.returncode == (0 if lines[0].startswith("no problem") else 1)


def test_version_and_help_state_the_defaults():
    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"mcu-npu {mcu_npu.__version__}"
    help_text = " ".join(run_cli("compile", "--help").stdout.split())
    default = inspect.signature(mcu_npu.compile).parameters["target"].default
    assert f"default {default}" in help_text
    from mcu_npu.npu import COMPILER_NAMES

    for name in COMPILER_NAMES:
        assert f"{name}:" in help_text, name
    assert "(default auto)" in help_text and "FILE.pt2" in help_text
    # the calibration method the command compiles with by default is compile()'s
    method = inspect.signature(mcu_npu.compile).parameters["calibration_method"].default
    assert f"{method} (default:" in help_text
    from mcu_npu.cli import build_parser

    assert build_parser().parse_args(
        ["compile", "m.py:f", "-o", "m.pte"]).calibration_method == method
