"""Bundled programs: what ExecuTorch's deserializer reads back is the device program with the
inputs the host ran and the outputs it produced; the host's own check catches a corrupted
expected output."""

from __future__ import annotations

import pytest
import torch

import mcu_npu
from executorch.devtools.etrecord import parse_etrecord
from executorch.devtools.bundled_program.serialize import \
    deserialize_from_flatbuffer_to_bundled_program
from mcu_npu.devtools.bundled import bundled_bytes, read_bundled
from mcu_npu.errors import HostDataMissingError, InputError, InvalidProgramError

from conftest import ONE_COMPILE_PER_TARGET, samples
from helpers import run_cli

pytestmark = [pytest.mark.slow, ONE_COMPILE_PER_TARGET]


def as_tensor(value) -> torch.Tensor:
    """A bundled tensor as ExecuTorch's schema holds it (contiguous data, sizes, dtype)."""
    from mcu_npu.runtime.kernels import dtype_of

    t = value.val
    return torch.frombuffer(bytearray(t.data), dtype=dtype_of(t.scalar_type)).reshape(t.sizes)


def test_bpte_holds_the_program_the_inputs_and_the_host_outputs(ds_cnn_debug, tmp_path):
    prog, xs = ds_cnn_debug.prog, samples(3)
    made = prog.save_bundled(tmp_path / "m.bpte", xs)
    bundle = deserialize_from_flatbuffer_to_bundled_program((tmp_path / "m.bpte").read_bytes())
    assert bytes(bundle.program) == prog.buffer
    (suite,) = bundle.method_test_suites
    assert suite.method_name == "forward" and len(suite.test_cases) == made.cases == 3
    for x, case in zip(xs, suite.test_cases):
        (bundled_input,) = case.inputs
        assert torch.equal(as_tensor(bundled_input), x)
        expected = [as_tensor(v) for v in case.expected_outputs]
        host = prog.run(x)
        assert len(expected) == len(host)
        assert all(torch.equal(e, h) for e, h in zip(expected, host))


def test_tolerance_is_one_step_of_the_dequantized_output(ds_cnn_debug, tmp_path):
    made = ds_cnn_debug.prog.save_bundled(tmp_path / "m.bpte", samples(1))
    record = parse_etrecord(str(ds_cnn_debug.etrecord))
    (out,) = record.edge_dialect_program.graph.output_node().args[0]
    assert "dequantize_per_tensor" in str(out.target)
    step = float(torch.tensor(out.args[1], dtype=torch.float32))  # as the kernel reads it
    assert made.tolerance.rtol == 0
    assert made.tolerance.atol == step
    assert "quantization step" in made.tolerance.basis
    stated = [n for n in ds_cnn_debug.prog.report.notes if "bundled program's checks" in n]
    assert stated == [f"a board's outputs may differ from the host run's by atol "
                      f"{step:g}, rtol 0: {made.tolerance.basis} (the tolerance of a bundled "
                      f"program's checks, save_bundled)"]
    pte = ds_cnn_debug.prog.save(tmp_path / "m.pte")
    assert mcu_npu.load(pte).report.notes == ds_cnn_debug.prog.report.notes


def test_host_check_passes_then_catches_a_corrupted_expected_output(ds_cnn_debug, tmp_path):
    prog = ds_cnn_debug.prog
    pte = prog.save(tmp_path / "m.pte")  # the companion beside: m.ptd
    prog.save_bundled(tmp_path / "m.bpte", samples(3))
    result = mcu_npu.check_bundled(tmp_path / "m.bpte")
    assert result.ok and len(result.cases) == 3

    program, cases = read_bundled((tmp_path / "m.bpte").read_bytes())
    inputs = [c[0] for c in cases]
    expected = [list(c[1]) for c in cases]
    expected[1][0] = expected[1][0].clone()
    expected[1][0].view(-1)[3] += 0.5
    (tmp_path / "bad.bpte").write_bytes(bundled_bytes(program, inputs, expected))
    (tmp_path / "bad.ptd").write_bytes((tmp_path / "m.ptd").read_bytes())
    bad = mcu_npu.check_bundled(tmp_path / "bad.bpte")
    assert not bad.ok
    assert [c.ok for c in bad.cases] == [True, False, True]
    assert bad.cases[1].max_abs_diff[0] == pytest.approx(0.5)

    assert run_cli("check", tmp_path / "m.bpte", "--bundled").returncode == 0
    failed = run_cli("check", tmp_path / "bad.bpte", "--bundled")
    assert failed.returncode == 1 and "case 1: MISMATCH" in failed.stdout
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "m.bpte").write_bytes((tmp_path / "m.bpte").read_bytes())
    if ds_cnn_debug.target == "corstone-300":  # Vela microcode: the host needs the .ptd
        with pytest.raises(HostDataMissingError, match="companion file"):
            mcu_npu.check_bundled(alone / "m.bpte")
    else:  # the reference payload is the graph itself
        assert mcu_npu.check_bundled(alone / "m.bpte").ok
    not_bundled = run_cli("check", pte, "--bundled")
    assert not_bundled.returncode == 2
    assert not_bundled.stderr.startswith("mcu-npu: error: not a bundled program")


def test_bad_bundled_inputs_are_refused(ds_cnn_debug, tmp_path):
    with pytest.raises(InputError, match="list of test cases"):
        ds_cnn_debug.prog.save_bundled(tmp_path / "m.bpte", samples(1)[0])
    with pytest.raises(InputError, match="has shape"):
        ds_cnn_debug.prog.save_bundled(tmp_path / "m.bpte", [torch.zeros(1, 1, 10, 49)])
    assert not (tmp_path / "m.bpte").exists()
    with pytest.raises(InvalidProgramError, match="not found"):
        mcu_npu.check_bundled(tmp_path / "missing.bpte")
