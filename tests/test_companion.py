"""The device ``.pte`` and its companion ``.ptd``: the board gets only what it reads, the host
gets everything else from the companion, and a companion never pairs with another program."""

from __future__ import annotations

import hashlib
import shutil

import numpy as np
import pytest
import torch

import mcu_npu
from helpers import MixedNpuCpu, assert_loads_in_executorch, device_split, run_cli
from mcu_npu.cli import EXIT_ERROR
from mcu_npu.errors import HostDataMissingError, InvalidProgramError
from mcu_npu.firmware import companion


def _samples(n=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(1, 3, 8, 8, generator=gen),) for _ in range(n)]


@pytest.fixture(scope="module")
def vela_prog():
    cal = _samples()
    return mcu_npu.compile(MixedNpuCpu().eval(), cal[0], target="corstone-300",
                           calibration=cal), cal


def test_the_pte_holds_no_host_data_and_the_companion_holds_it(vela_prog, tmp_path):
    prog, _ = vela_prog
    path = prog.save(tmp_path / "m.pte")
    pte, ptd = path.read_bytes(), (tmp_path / "m.ptd").read_bytes()
    assert pte == prog.buffer
    assert device_split(pte)["named_data"] == {}
    graphs = {k: v for k, v in companion.read_named_data(ptd, "m.ptd").items()
              if k.startswith("mcu_npu.host_graph.")}
    assert graphs and graphs == prog.host_data
    for graph in graphs.values():
        assert graph not in pte
    assert companion.stored_report(prog.report) not in pte
    assert b'"ops"' not in pte  # no copy of the report in any form
    record = companion.read_named_data(ptd, "m.ptd")[companion.COMPANION_KEY]
    assert hashlib.sha256(pte).hexdigest().encode() in record


def test_the_pte_bytes_do_not_depend_on_the_companion(vela_prog, tmp_path):
    prog, cal = vela_prog
    prog.save(tmp_path / "a.pte")
    prog.report.notes.append("a note added after the compile")
    try:
        prog.save(tmp_path / "b.pte")
    finally:
        prog.report.notes.pop()
    assert (tmp_path / "a.pte").read_bytes() == (tmp_path / "b.pte").read_bytes()
    assert (tmp_path / "a.ptd").read_bytes() != (tmp_path / "b.ptd").read_bytes()
    assert "a note added after the compile" in mcu_npu.load(tmp_path / "b.pte").report.notes


def test_a_pair_copied_elsewhere_loads_and_runs_the_same(vela_prog, tmp_path):
    prog, cal = vela_prog
    prog.save(tmp_path / "build" / "model.pte")
    (tmp_path / "board").mkdir()
    for name in ("model.pte", "model.ptd"):
        shutil.copy(tmp_path / "build" / name, tmp_path / "board" / name)
    loaded = mcu_npu.load(tmp_path / "board" / "model.pte")
    for (x,) in cal:
        assert torch.equal(loaded.run(x)[0], prog.run(x)[0])
    assert loaded.report.to_dict() == prog.report.to_dict()


def test_another_programs_companion_is_refused(vela_prog, tmp_path):
    prog, cal = vela_prog
    other = mcu_npu.compile(torch.nn.Conv2d(3, 4, 1).eval(), cal[0], target="imxrt700",
                            calibration=cal[:2])
    assert prog.buffer != other.buffer
    prog.save(tmp_path / "m.pte")
    other.save(tmp_path / "other.pte")
    shutil.copy(tmp_path / "other.ptd", tmp_path / "m.ptd")
    with pytest.raises(InvalidProgramError, match=r"m\.ptd' belongs to another program"):
        mcu_npu.load(tmp_path / "m.pte")
    with pytest.raises(InvalidProgramError, match="belongs to another program"):
        mcu_npu.load(prog.buffer, companion=other.companion)
    # the same report and graphs, written for a .pte one byte away: refused all the same
    tampered = bytearray(prog.buffer)
    tampered[-1] ^= 1
    with pytest.raises(InvalidProgramError, match="belongs to another program"):
        mcu_npu.load(prog.buffer, companion=companion.pack(bytes(tampered), prog.report,
                                                           prog.host_data))
    result = run_cli("report", str(tmp_path / "m.pte"))
    assert result.returncode == EXIT_ERROR
    assert "belongs to another program" in result.stderr and "Traceback" not in result.stderr


def test_a_file_that_is_no_companion_is_refused(vela_prog, tmp_path):
    prog, _ = vela_prog
    (tmp_path / "junk.ptd").write_bytes(b"not a data file" * 10)
    with pytest.raises(InvalidProgramError, match="junk.ptd' is not an ExecuTorch data file"):
        mcu_npu.load(prog.buffer, companion=tmp_path / "junk.ptd")
    from executorch.exir._serialize.data_serializer import DataEntry, DataPayload
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    foreign = bytes(FlatTensorSerializer().serialize(DataPayload(
        buffers=[b"\1" * 16], named_data={"weight": DataEntry(0, 16, None)})))
    with pytest.raises(InvalidProgramError, match="no mcu-npu companion"):
        mcu_npu.load(prog.buffer, companion=foreign)


def test_without_its_companion_a_vendor_program_names_the_file_it_needs(vela_prog, tmp_path):
    prog, cal = vela_prog
    prog.save(tmp_path / "m.pte")
    (tmp_path / "m.ptd").unlink()
    loaded = mcu_npu.load(tmp_path / "m.pte")
    with pytest.raises(HostDataMissingError, match=r"needs its companion file '.*m\.ptd'"):
        loaded.run(*cal[0])
    np.save(tmp_path / "x.npy", cal[0][0].numpy())
    result = run_cli("run", str(tmp_path / "m.pte"), "--input", str(tmp_path / "x.npy"))
    assert result.returncode == EXIT_ERROR
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "m.ptd" in lines[0] and "companion" in lines[0]


def test_the_pte_alone_reports_what_it_holds(vela_prog, tmp_path):
    prog, _ = vela_prog
    prog.save(tmp_path / "m.pte")
    (tmp_path / "m.ptd").unlink()
    report = mcu_npu.load(tmp_path / "m.pte").report
    assert report.device_only and report.target == "corstone-300"
    assert report.npu_compiler == "vela" and len(report.partitions) == len(prog.report.partitions)
    for key in ("pte_schema", "runtime", "delegate_payload"):
        assert report.versions[key] == prog.report.versions[key]
    assert report.memory["flash"] == prog.report.memory["flash"]
    assert [k["op"] for k in report.kernels] == [k["op"] for k in prog.report.kernels]
    text = run_cli("report", str(tmp_path / "m.pte"))
    assert text.returncode == 0, text.stderr
    assert "target corstone-300" in text.stdout and "companion file" in text.stdout
    assert "cortex_m::" in text.stdout and "program tables" in text.stdout
    check = run_cli("check", str(tmp_path / "m.pte"), "--target", "corstone-300")
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout == f"{tmp_path / 'm.pte'}: no problem found for corstone-300's board\n"


def test_the_device_pte_alone_loads_in_executorch(vela_prog):
    prog, cal = vela_prog
    split = device_split(prog.buffer)
    assert split["named_data"] == {} and split["payloads"] > 0
    assert split["overhead"] + split["payloads"] + split["constants"] == len(prog.buffer)
    assert_loads_in_executorch(prog.buffer, cal[0], prog.run(*cal[0]))


def test_a_companion_given_by_path_or_on_the_cli(vela_prog, tmp_path):
    prog, cal = vela_prog
    prog.save(tmp_path / "m.pte")
    (tmp_path / "m.ptd").rename(tmp_path / "elsewhere.ptd")
    loaded = mcu_npu.load(tmp_path / "m.pte", companion=tmp_path / "elsewhere.ptd")
    assert torch.equal(loaded.run(*cal[0])[0], prog.run(*cal[0])[0])
    result = run_cli("report", str(tmp_path / "m.pte"), "--companion",
                     str(tmp_path / "elsewhere.ptd"), "--json")
    assert result.returncode == 0 and '"ops_on_npu"' in result.stdout
    assert '"device_only"' not in result.stdout


def test_the_lean_check_catches_host_data_in_a_pte():
    """``assert_device_program_is_lean``, which every compile in the tests goes through,
    refuses a program carrying named data (as programs did before the companion file)."""
    from executorch.exir import to_edge

    from helpers import assert_device_program_is_lean

    x = torch.randn(2, 3)
    edge = to_edge(torch.export.export(torch.nn.ReLU(), (x,)))
    assert_device_program_is_lean(edge.to_executorch().buffer)
    edge = to_edge(torch.export.export(torch.nn.ReLU(), (x,)))
    edge._named_data_store.add_named_data("mcu_npu.report", b"{}" * 64)
    with pytest.raises(AssertionError, match="named data no device runtime reads"):
        assert_device_program_is_lean(edge.to_executorch().buffer)
