"""Host-only programs say so, and the device refuses their payloads cleanly (issue 17, item 1).

Without NXP's eIQ SDK an imxrt700 compile uses the reference compiler, whose payload only the
host emulator reads: compile() warns, the report's first line says so, ``deployable=True``
and ``--require-deployable`` refuse. The reference payload is held against a transcription of
``NeutronBackend::init`` (neutron_init_checks.py): the device refuses it; the Neutron layout
from the SDK test double passes.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from neutron_init_checks import init as neutron_init
from zoo.neutron_sdk_double import Behaviour, install
from torch import nn

import mcu_npu
from mcu_npu import cli
from mcu_npu.firmware.deployability import NotDeployableError
from mcu_npu.errors import InvalidProgramError
from mcu_npu.npu.ethos_u import payload as ethosu_payload
from mcu_npu.npu.neutron import payload as nxp
from mcu_npu.device.payload import DEVICE_GUARD, is_container, pack, unpack, unpack_reference
from mcu_npu.report import HOST_ONLY_LINE
from mcu_npu.runtime.pte import load

MODEL_FILE = '''
import torch, torch.nn as nn

def small():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU()).eval(), (torch.randn(1, 1, 6, 6),)
'''


def small():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU()).eval(), torch.randn(1, 1, 6, 6)


def payloads(buffer: bytes) -> list[bytes]:
    program = load(buffer)._pte.program
    return [bytes(program.backend_delegate_data[d.processed.index].data)
            for plan in program.execution_plan for d in plan.delegates]


@pytest.fixture(scope="module")
def host_only():
    """(program, warnings) of an imxrt700 compile with the reference compiler."""
    model, x = small()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        prog = mcu_npu.compile(model, x, "imxrt700", calibration=[x])
    return prog, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


@pytest.fixture(scope="module")
def neutron_prog():
    """An imxrt700 program compiled by the eIQ SDK test double."""
    mp = pytest.MonkeyPatch()
    try:
        install(mp, Behaviour())
        model, x = small()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            prog = mcu_npu.compile(model, x, "imxrt700", calibration=[x], deployable=True)
    finally:
        mp.undo()
    return prog, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def test_host_only_compile_warns_and_the_report_says_so(host_only):
    prog, caught = host_only
    assert prog.report.npu_compiler == "reference" and prog.report.host_only
    host = [w for w in caught if "runs on the host only" in w]
    assert len(host) == 1 and "eIQ Neutron SDK" in host[0] and "npu_compiler=\"auto\"" in host[0]
    assert str(prog.report).splitlines()[0] == HOST_ONLY_LINE
    stored = mcu_npu.load(prog.buffer).report  # the flag travels in the .pte's own record
    assert stored.host_only and str(stored).splitlines()[0] == HOST_ONLY_LINE
    # the host still runs it, as before
    assert prog.report.accuracy["sqnr_db"] > 30


def test_deployable_refuses_host_only_payloads():
    model, x = small()
    with pytest.raises(NotDeployableError, match="eIQ Neutron SDK.*or keep every op on the CPU"):
        mcu_npu.compile(model, x, "imxrt700", calibration=[x], deployable=True)


def test_vendor_payloads_do_not_warn(neutron_prog):
    prog, caught = neutron_prog
    assert not prog.report.host_only and not any("host only" in w for w in caught)
    assert not str(prog.report).startswith("HOST ONLY")
    assert prog.report.versions["neutron_payload_versions"] == [0]


def test_cpu_only_program_is_deployable():
    model, x = small()
    prog = mcu_npu.compile(model, x, "imxrt700", calibration=[x],
                           operators_not_to_delegate=["*"], deployable=True)
    assert not prog.report.host_only and not prog.report.partitions


def test_cli_warns_and_require_deployable_fails_with_one_line(tmp_path, capsys):
    (tmp_path / "models.py").write_text(MODEL_FILE)
    spec = f"{tmp_path / 'models.py'}:small"
    out = tmp_path / "o.pte"
    assert cli.main(["compile", spec, "--target", "imxrt700", "-o", str(out)]) == 0
    got = capsys.readouterr()
    assert out.exists() and got.out.splitlines()[0] == HOST_ONLY_LINE
    assert "mcu-npu: warning: target imxrt700: the NPU partitions were compiled by the " \
           "reference compiler" in got.err

    refused = tmp_path / "refused.pte"
    code = cli.main(["compile", spec, "--target", "imxrt700", "--require-deployable",
                     "-o", str(refused)])
    got = capsys.readouterr()
    # one error line (warnings about the arguments, such as no calibration, come before it)
    lines = [line for line in got.err.strip().splitlines()
             if line.startswith("mcu-npu:") and not line.startswith("mcu-npu: warning:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in got.err, got.err
    assert lines[0].startswith("mcu-npu: error: target imxrt700:") and "eIQ Neutron SDK" in lines[0]
    assert not refused.exists() and sorted(p.name for p in tmp_path.iterdir()) == \
        ["models.py", "o.ptd", "o.pte"]


# --- the device's own checks refuse the reference payload --------------------------------
def test_reference_payload_is_refused_by_the_neutron_init(host_only):
    (payload,) = payloads(host_only[0].buffer)
    assert is_container(payload) and payload[:4] == DEVICE_GUARD
    assert neutron_init(payload) == (
        "InvalidProgram", "Preprocessed buffer does not contain a valid Neutron microcode")
    with pytest.raises(InvalidProgramError, match="^not a Neutron payload: the microcode magic"):
        nxp.parse(payload)
    with pytest.raises(InvalidProgramError, match="Vela bin stream"):
        ethosu_payload.parse(payload)  # the Ethos-U reader refuses it too
    model, meta = unpack_reference(payload)  # while the host reads it
    assert meta["compiler"] == "reference" and model.buffer


def test_neutron_layout_passes_the_init_checks(neutron_prog):
    (payload,) = payloads(neutron_prog[0].buffer)
    assert not is_container(payload)
    assert neutron_init(payload) == ("Ok", "")
    fields = nxp.parse(payload)
    assert (len(fields.input_map), len(fields.output_map), fields.version) == (1, 1, 0)


def test_every_small_container_is_refused_by_the_init():
    """Whatever the sections, the guard keeps the device from reading the container: the
    microcode magic the init looks for sits where the container always holds zeros."""
    for sections in ({}, {"meta": b"{}"}, {"meta": b"nMCd" * 40, "tflite": bytes(range(256))}):
        blob = pack(sections)
        assert unpack(blob) == sections
        assert neutron_init(blob)[0] == "InvalidProgram"
        with pytest.raises(InvalidProgramError, match="^not a Neutron payload"):
            nxp.parse(blob)


def test_version_1_containers_still_read():
    import struct

    v1 = b"MNPU" + struct.pack("<HH", 1, 1) + struct.pack("<16sII", b"meta", 32, 2) + \
        b"{}".ljust(16, b"\0")
    assert is_container(v1) and unpack(v1) == {"meta": b"{}"}
