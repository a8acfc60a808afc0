"""Nothing lost, nothing crashes: a damaged or crafted program is refused with
InvalidProgramError by both runtimes before ExecuTorch's C++ runtime sees it (run in a
subprocess here, so a crash fails the test instead of killing the worker); an input in any
layout gives the host's answer in ExecuTorch's runtime; a save writes the .pte/.ptd pair all
or none, and every file-system failure is the project's own error, found before a compile
starts where the command line can see it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import mcu_npu
from mcu_npu import cli
from mcu_npu.errors import ConfigError, InvalidProgramError, OutputError, UnsupportedModelError

SRC = Path(mcu_npu.__file__).resolve().parents[1]


class Tiny(nn.Module):
    """A conv (the NPU), a ceil-mode max pool kept on the CPU (ExecuTorch's portable kernel),
    a linear (the NPU): every kind of call a program makes."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 2 * 2, 5)

    def forward(self, x):
        y = nn.functional.max_pool2d(torch.relu(self.conv(x)), 3, 2, ceil_mode=True)
        return self.fc(y.flatten(1))


@pytest.fixture(scope="module")
def tiny():
    """(compiled program, an input), compiled once for the module."""
    torch.manual_seed(0)
    x = torch.randn(1, 3, 6, 6)
    prog = mcu_npu.compile(Tiny(), (x,), target="imxrt700", npu_compiler="reference",
                           calibration=[(torch.randn(1, 3, 6, 6),) for _ in range(4)],
                           operators_not_to_delegate=["aten.max_pool2d",
                                                      "aten.max_pool2d_with_indices"])
    assert "aten::max_pool2d_with_indices.out" in mcu_npu.runtime.load(
        prog.buffer, prog.host_data).kernel_names
    return prog, x


def _python(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh interpreter on this source tree."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(SRC), os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


# --- crafted and damaged programs ------------------------------------------------------------

def _edited(buffer: bytes, edit) -> bytes:
    """``buffer`` with ``edit(plan)`` applied to its method, written by ExecuTorch's own
    serializer."""
    from executorch.exir._serialize._program import deserialize_pte_binary, \
        serialize_pte_binary

    pte = deserialize_pte_binary(buffer)
    edit(pte.program.execution_plan[0])
    return bytes(serialize_pte_binary(pte))


def _calls(plan, kind: str, namespace: str = ""):
    return [i.instr_args for c in plan.chains for i in c.instructions
            if type(i.instr_args).__name__ == kind and
            (not namespace or plan.operators[i.instr_args.op_index].name.startswith(namespace))]


def _value_of_kind(plan, kind: str) -> int:
    return next(i for i, v in enumerate(plan.values) if type(v.val).__name__ == kind)


def _tensors(plan):
    return [v.val for v in plan.values if type(v.val).__name__ == "Tensor"]


def _pool_arg(plan, k: int, value: int) -> None:
    """The first item of argument ``k`` of the max pool call set to ``value`` (1 kernel_size,
    2 stride, 3 padding, 4 dilation)."""
    call = _calls(plan, "KernelCall", "aten::max_pool")[0]
    plan.values[plan.values[call.args[k]].val.items[0]].val.int_val = value


EDITS = {  # one structural fault each; ExecuTorch loads most of them and then misbehaves
    "op_index": lambda p: setattr(_calls(p, "KernelCall")[0], "op_index", 99),
    "op_index_negative": lambda p: setattr(_calls(p, "KernelCall")[0], "op_index", -1),
    "kernel_arg_index": lambda p: _calls(p, "KernelCall")[0].args.__setitem__(0, 10**6),
    "portable_arg_kind": lambda p: _calls(p, "KernelCall", "aten::")[0].args.__setitem__(
        0, _value_of_kind(p, "Int")),
    "portable_args_short": lambda p: _calls(p, "KernelCall", "aten::")[0].args.__delitem__(
        slice(2, None)),
    "delegate_index": lambda p: setattr(_calls(p, "DelegateCall")[0], "delegate_index", 7),
    "delegate_payload": lambda p: setattr(p.delegates[0].processed, "index", 5),
    "compile_spec_key": lambda p: setattr(p.delegates[0].compile_specs[0], "key", None),
    "input_index": lambda p: p.inputs.__setitem__(0, 10**6),
    "negative_size": lambda p: _tensors(p)[-1].sizes.__setitem__(0, -3),
    "dim_order": lambda p: setattr(_tensors(p)[-1], "dim_order", [0, 0]),
    "memory_offset": lambda p: setattr(next(
        t for t in _tensors(p) if t.allocation_info).allocation_info, "memory_offset_low", 10**8),
    "memory_size": lambda p: p.non_const_buffer_sizes.__setitem__(-1, 4),
    "no_chain": lambda p: p.chains.clear(),
    # argument values: ExecuTorch's portable max pool looped for minutes on the flipped
    # kernel size, died of SIGFPE on the zero stride, ran the zero dilation
    "pool_kernel_size_flipped": lambda p: _pool_arg(p, 1, 3 ^ (1 << 40)),
    "pool_stride_zero": lambda p: _pool_arg(p, 2, 0),
    "pool_padding_past_half_the_window": lambda p: _pool_arg(p, 3, 2),
    "pool_dilation_zero": lambda p: _pool_arg(p, 4, 0),
    "pool_window_past_the_input": lambda p: _pool_arg(p, 1, 7),
}

WINDOW_ERRORS = {
    "pool_kernel_size_flipped": "passes kernel_size [1099511627779, 3] to "
                                "aten::max_pool2d_with_indices.out, whose items must be 1 to "
                                "1073741824",
    "pool_stride_zero": "passes stride [0, 2] to aten::max_pool2d_with_indices.out, whose "
                        "items must be 1 to 1073741824",
    "pool_padding_past_half_the_window": "passes kernel_size [3, 3], stride [2, 2], padding "
                                         "[2, 0] and dilation [1, 1] to "
                                         "aten::max_pool2d_with_indices.out for an input of "
                                         "sizes [1, 4, 4, 4]: along dim 2 the padding (2) must "
                                         "be at most half the kernel size and the window "
                                         "(spanning 3) give an output (it gives 3)",
    "pool_dilation_zero": "passes dilation [0, 1] to aten::max_pool2d_with_indices.out, whose "
                          "items must be 1 to 1073741824",
    "pool_window_past_the_input": "passes kernel_size [7, 3], stride [2, 2], padding [0, 0] "
                                  "and dilation [1, 1] to aten::max_pool2d_with_indices.out "
                                  "for an input of sizes [1, 4, 4, 4]: along dim 2 the padding "
                                  "(0) must be at most half the kernel size and the window "
                                  "(spanning 7) give an output (it gives 0)",
}


@pytest.mark.parametrize("name", sorted(WINDOW_ERRORS))
def test_window_argument_values_out_of_range_are_refused_at_load(tiny, name):
    """A kernel's window arguments decide its loop bounds: out of range, or a pooling window
    that does not fit its padded input, the program is refused before it runs."""
    prog, _ = tiny
    with pytest.raises(InvalidProgramError) as caught:
        mcu_npu.runtime.load(_edited(prog.buffer, EDITS[name]), prog.host_data)
    assert str(caught.value) == f"method 'forward', instruction 3 {WINDOW_ERRORS[name]}"


def test_a_kernel_call_past_the_operator_table_is_refused_in_both_runtimes(tiny, tmp_path):
    """ExecuTorch logs "Op index 99 out of range", loads the program anyway and crashes in
    execute: the structural check refuses it first, in the API and the command line."""
    prog, x = tiny
    bad = _edited(prog.buffer, EDITS["op_index"])
    with pytest.raises(InvalidProgramError, match="calls operator 99, the method has 3"):
        mcu_npu.load(bad).run(x)
    (tmp_path / "bad.pte").write_bytes(bad)
    import numpy as np

    np.save(tmp_path / "x.npy", x.numpy())
    done = _python("""
        import sys
        import torch
        import mcu_npu
        from mcu_npu import cli
        from mcu_npu.errors import InvalidProgramError
        try:
            mcu_npu.load(sys.argv[1]).run(torch.zeros(1, 3, 6, 6), runtime="executorch")
        except InvalidProgramError as exc:
            print("api:", exc)
        sys.exit(cli.main(["run", sys.argv[1], "--input", sys.argv[2],
                           "--runtime", "executorch"]))
        """, str(tmp_path / "bad.pte"), str(tmp_path / "x.npy"))
    assert done.returncode == cli.EXIT_ERROR, (done.returncode, done.stderr[-2000:])
    assert "api: method 'forward', instruction 0 calls operator 99" in done.stdout
    assert "mcu-npu: error: method 'forward', instruction 0 calls operator 99" in done.stderr
    assert "Traceback" not in done.stderr


def _damaged(buffer: bytes, flips: int = 16) -> dict[str, bytes]:
    """The field edits, truncations and seeded single-bit flips of ``buffer``."""
    cases = {f"edit {name}": _edited(buffer, edit) for name, edit in EDITS.items()}
    for cut in (1, 8, 100, len(buffer) // 2, len(buffer) - 16):
        cases[f"truncated by {cut}"] = buffer[:-cut]
    rng = random.Random(36)
    for _ in range(flips):
        data = bytearray(buffer)
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
        cases[f"bit flip at {at}"] = bytes(data)
    return cases


_FUZZ = """
    import json, sys
    from pathlib import Path
    import torch
    from mcu_npu.errors import McuNpuError
    from mcu_npu.runtime import load
    from mcu_npu.runtime.executorch import run_with

    folder = Path(sys.argv[1])
    x = torch.load(folder / "x.pt")
    host_data = {k: bytes.fromhex(v) for k, v in
                 json.loads((folder / "host_data.json").read_text()).items()}
    for case in sorted(folder.glob("*.pte")):
        for runtime in ("host", "executorch"):
            print(case.stem, runtime, end=": ", flush=True)  # the last line names a crash
            try:
                run_with(runtime, load(case.read_bytes(), host_data), (x,))
                print("ran", flush=True)
            except McuNpuError as exc:
                print(type(exc).__name__, str(exc).splitlines()[0], flush=True)
    """


def test_damaged_programs_never_crash_either_runtime(tiny, tmp_path):
    """Field edits made with ExecuTorch's serializer, truncations and bit flips: each runs
    or is refused with the project's error in both runtimes, and a structural fault is
    refused by both with the same message; no case kills the process."""
    prog, x = tiny
    cases = _damaged(prog.buffer)
    names = {}
    for k, (name, data) in enumerate(cases.items()):
        names[f"case{k:03d}"] = name
        (tmp_path / f"case{k:03d}.pte").write_bytes(data)
    torch.save(x, tmp_path / "x.pt")
    (tmp_path / "host_data.json").write_text(
        json.dumps({k: v.hex() for k, v in prog.host_data.items()}))
    done = _python(_FUZZ, str(tmp_path))
    lines = done.stdout.splitlines()
    assert done.returncode == 0, (
        f"{names[lines[-1].split()[0]]!r} ({lines[-1]}) ended the process with "
        f"{done.returncode}: {done.stderr[-1500:]}")
    outcomes: dict[str, dict[str, str]] = {}
    for line in lines:
        case, runtime, outcome = line.split(" ", 2)
        outcomes.setdefault(names[case], {})[runtime.rstrip(":")] = outcome
    assert len(outcomes) == len(cases) and all(len(o) == 2 for o in outcomes.values())
    for name, outcome in outcomes.items():
        for runtime, result in outcome.items():
            assert result == "ran" or result.split()[0].endswith("Error"), (name, result)
        if name.startswith(("edit", "truncated")):
            assert outcome["host"].startswith("InvalidProgramError"), (name, outcome)
            assert outcome["host"] == outcome["executorch"], (name, outcome)


# --- inputs in any layout --------------------------------------------------------------------

def test_executorch_runtime_gives_the_host_answer_for_any_input_layout(tiny):
    prog, x = tiny
    expected = prog.run(x)
    for layout in (x.to(memory_format=torch.channels_last),
                   x.transpose(2, 3).contiguous().transpose(2, 3)):
        assert not layout.is_contiguous()
        assert torch.equal(prog.run(layout)[0], expected[0])
        assert torch.equal(prog.run(layout, runtime="executorch")[0], expected[0])


# --- saving: all or nothing ------------------------------------------------------------------

def _another(prog):
    """A program whose save writes other bytes than ``prog``'s (a small .pte, a companion
    of several KiB)."""
    return dataclasses.replace(prog, buffer=b"another program " * 4)


def _saved_pair(prog, folder: Path) -> tuple[Path, dict[str, bytes]]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "m.pte"
    prog.save(path)
    return path, {p.name: p.read_bytes() for p in folder.iterdir()}


def _unchanged(folder: Path, before: dict[str, bytes]) -> bool:
    return {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_save_that_fills_the_disk_keeps_the_previous_pair(tiny, tmp_path):
    prog, _ = tiny
    path, before = _saved_pair(prog, tmp_path / "out")
    new = _another(prog)
    assert len(new.buffer) < 4096 < len(new.companion)  # the .pte fits, the .ptd does not
    done = _python("""
        import dataclasses, resource, sys
        import mcu_npu
        from mcu_npu.api import CompiledProgram
        old = mcu_npu.load(sys.argv[1])
        new = CompiledProgram(b"another program " * 4, old.report,
                              host_data=old.companion.host_data)
        companion = new.companion
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
        try:
            new.save(sys.argv[1])
        except Exception as exc:
            print(f"{type(exc).__name__}: {exc}")
        """, str(path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert _unchanged(path.parent, before)
    assert f"OutputError: cannot write '{path.with_suffix('.ptd')}': File too large" in \
        done.stdout


def test_a_directory_in_the_way_keeps_the_previous_pte(tiny, tmp_path):
    prog, _ = tiny
    path, before = _saved_pair(prog, tmp_path)
    path.with_suffix(".ptd").unlink()
    path.with_suffix(".ptd").mkdir()
    with pytest.raises(OutputError, match=r"cannot write '.*m\.ptd': it is a folder"):
        _another(prog).save(path)
    assert path.read_bytes() == before["m.pte"]
    assert {p.name for p in tmp_path.iterdir()} == {"m.pte", "m.ptd"}


def test_a_failed_rename_puts_the_previous_pair_back(tiny, tmp_path, monkeypatch):
    """The .pte is already renamed into place when the .ptd's rename fails: the old .pte
    comes back."""
    prog, _ = tiny
    path, before = _saved_pair(prog, tmp_path)
    real = os.replace

    def replace(src, dst):
        if str(dst).endswith(".ptd"):
            raise OSError(5, "Input/output error")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OutputError, match=r"m\.ptd': Input/output error"):
        _another(prog).save(path)
    monkeypatch.undo()
    assert _unchanged(tmp_path, before)


def test_a_read_only_folder_keeps_the_previous_pair(tiny, tmp_path, tmp_path_factory,
                                                    monkeypatch):
    """Permissions do not stop root: as root the save runs with the effective user
    'nobody', for whom the folder really is read-only."""
    prog, _ = tiny
    folder = Path(os.path.realpath(tmp_path)) / "ro"
    path, before = _saved_pair(prog, folder)
    new = _another(prog)
    companion = new.companion  # made while the serializer's schema files can be read
    monkeypatch.setattr(type(new), "companion", property(lambda self: companion))
    root = os.geteuid() == 0
    if root:  # 'nobody' must reach the folder: open pytest's own folders on the way
        top = Path(os.path.realpath(tmp_path_factory.getbasetemp())).parent
        for p in [folder, *folder.parents]:
            if p == top.parent:
                break
            p.chmod(p.stat().st_mode | 0o011)
        if any(not p.stat().st_mode & 0o001 for p in top.parents):
            pytest.skip(f"user 'nobody' cannot reach {top}")
    folder.chmod(0o555)
    try:
        if root:
            os.seteuid(65534)
        with pytest.raises(OutputError, match=r"cannot write '.*m\.pte': .*not writable"):
            new.save(path)
    finally:
        if root:
            os.seteuid(0)
        folder.chmod(0o755)
    assert _unchanged(folder, before)


def test_a_file_where_a_folder_should_be_is_named(tiny, tmp_path):
    prog, _ = tiny
    (tmp_path / "afile").write_text("")
    with pytest.raises(OutputError, match=r"cannot write '.*afile/m\.pte': '.*afile' is a "
                                          r"file, not a folder"):
        prog.save(tmp_path / "afile" / "m.pte")


# --- the command line: outputs checked first, the factory's failure named ---------------------

MODELS = """
import torch

def failing():
    raise ValueError("no weights found")

def never():
    raise AssertionError("the outputs should have been checked first")
"""


@pytest.mark.parametrize("option", ["-o", "--etrecord", "--c-header", "--ops-yaml"])
def test_compile_checks_its_output_paths_before_compiling(option, tmp_path, capsys):
    models = tmp_path / "models.py"
    models.write_text(MODELS)
    (tmp_path / "afile").write_text("")
    bad = str(tmp_path / "afile" / "out")
    argv = ["compile", f"{models}:never", "-o", str(tmp_path / "m.pte")]
    argv = [*argv[:3], bad] if option == "-o" else [*argv, option, bad]
    assert cli.main(argv) == cli.EXIT_ERROR
    err = capsys.readouterr().err.strip()
    assert err == f"mcu-npu: error: cannot write '{bad}': '{tmp_path / 'afile'}' is a file, " \
                  "not a folder"
    assert not (tmp_path / "m.pte").exists()


def test_run_and_report_check_their_output_paths_first(tiny, tmp_path, capsys):
    prog, x = tiny
    prog.save(tmp_path / "m.pte")
    import numpy as np

    np.save(tmp_path / "x.npy", x.numpy())
    (tmp_path / "afile").write_text("")
    bad = str(tmp_path / "afile" / "out")
    for argv in (["run", str(tmp_path / "m.pte"), "--input", str(tmp_path / "x.npy"),
                  "--output", bad],
                 ["report", str(tmp_path / "m.pte"), "--html", bad]):
        assert cli.main(argv) == cli.EXIT_ERROR
        captured = capsys.readouterr()
        assert captured.err.startswith(f"mcu-npu: error: cannot write '{bad}'")
        assert captured.out == ""  # refused before the program ran or printed


def test_a_failing_model_factory_is_one_line_naming_it(tmp_path, capsys):
    models = tmp_path / "models.py"
    models.write_text(MODELS)
    assert cli.main(["compile", f"{models}:failing", "-q", "-o", str(tmp_path / "m.pte")]) == \
        cli.EXIT_ERROR  # -q: no progress lines, so stderr holds the error alone
    assert capsys.readouterr().err == (f"mcu-npu: error: the model factory {models}:failing "
                                       "failed: ValueError: no weights found\n")


# --- compile arguments and bundled programs --------------------------------------------------

@pytest.mark.parametrize("target,compiler", [("imxrt700", "vela"),
                                             ("corstone-300", "neutron")])
def test_an_npu_compiler_of_another_npu_is_a_config_error(target, compiler):
    with pytest.raises(ConfigError, match=f"npu_compiler '{compiler}' does not compile for "
                                          f"target {target}.*choose one of: auto, reference"):
        mcu_npu.compile(nn.Linear(4, 2), (torch.randn(1, 4),), target=target,
                        npu_compiler=compiler)


class DictOut(nn.Module):
    def forward(self, x):
        return {"logits": x * 2, "features": x + 1}


class NoneOut(nn.Module):
    def forward(self, x):
        return x * 2, None


@pytest.mark.parametrize("model,message", [
    (DictOut(), r"returns a dict \(keys 'logits', 'features'\).*return a tuple of tensors"),
    (NoneOut(), r"output 1 of the model is None; a program's outputs are tensors")])
def test_dict_and_none_outputs_are_refused_before_compiling(model, message):
    with pytest.raises(UnsupportedModelError, match=message):
        mcu_npu.compile(model, (torch.randn(1, 4),), target="imxrt700",
                        calibration=[(torch.randn(1, 4),)])


def test_a_truncated_bundled_program_is_refused(tiny, tmp_path):
    prog, x = tiny
    path = tmp_path / "m.bpte"
    prog.save(tmp_path / "m.pte")
    prog.save_bundled(path, [x])
    assert mcu_npu.check_bundled(path).ok
    whole = path.read_bytes()
    path.write_bytes(whole[:-1])
    with pytest.raises(InvalidProgramError, match=f"the bundled program is truncated: its "
                                                  f"contents take {len(whole)} bytes, the file "
                                                  f"has {len(whole) - 1}"):
        mcu_npu.check_bundled(path)
