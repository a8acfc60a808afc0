"""The memory map of each target, the memory report read from the program, and the fit check
(issue 15, items 1 and 2)."""

from __future__ import annotations

import struct
import warnings

import pytest
import torch
from torch import nn

import mcu_npu
from mcu_npu.errors import MemoryFitError
from mcu_npu.npu.ethos_u import payload as ethosu_payload
from mcu_npu.npu.neutron import payload as neutron_payload
from mcu_npu.estimate.memory import check_fit, memory_report, payload_figures
from mcu_npu.report.text import memory_lines
from mcu_npu.runtime.pte import Program
from mcu_npu.targets import MEMORY_KINDS, get_target, targets

U55, RT700 = "ethos-u55-128", "imxrt700"


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


class BigActivation(nn.Module):
    """A 1x1 convolution on a 768 x 1024 image: no weights to speak of, but 3 MiB float
    inputs and outputs that ExecuTorch plans in RAM, and 0.75 MiB int8 ones in the NPU's
    scratch; more than the 2 MiB SRAM of the ethos-u55-128 preset and the 5.5 MiB of the
    i.MX RT700's compute domain."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 1)

    def forward(self, x):
        return torch.relu(self.conv(x))


def _compile(model, shape, target, **kwargs):
    x = (torch.randn(*shape),)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = mcu_npu.compile(model.eval(), x, target=target, calibration=[x], **kwargs)
    fit = [str(w.message) for w in caught if issubclass(w.category, UserWarning)
           and "does not fit" in str(w.message)]
    return prog, fit


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    return {t: _compile(Small(), (1, 3, 8, 8), t) for t in (U55, RT700)}


@pytest.fixture(scope="module")
def big():
    torch.manual_seed(0)
    return {t: _compile(BigActivation(), (1, 1, 768, 1024), t) for t in (U55, RT700)}


# --- the memory map -------------------------------------------------------------------
def test_every_target_has_a_sourced_memory_map():
    for name in targets():
        t = get_target(name)
        assert t.memory, name
        for region in t.memory:
            assert region.kind in MEMORY_KINDS and region.source, (name, region.name)
        assert t.region_for("program") is not None and t.region_for("ram") is not None, name


def test_imxrt700_map():
    t = get_target(RT700)
    sram, flash = t.region_for("ram"), t.region_for("program")
    assert (sram.kind, sram.size_bytes, sram.npu_access) == ("sram", 0x580000, True)
    assert (flash.kind, flash.npu_access) == ("flash", False)  # Neutron reads no flash


def test_npu_only_presets_follow_vela_memory_modes():
    assert [r.holds for r in get_target(U55).memory] == [("ram",), ("program",)]
    assert get_target(U55).region_for("ram").size_bytes == 2 * 1024 * 1024
    assert get_target("ethos-u85-256").region_for("program").kind == "sram"  # Sram_Only
    u65 = get_target("ethos-u65-256")
    assert u65.region_for("fast_scratch").size_bytes == 384 * 1024  # Dedicated_Sram_384KB


# --- fit --------------------------------------------------------------------------------
@pytest.mark.parametrize("target", [U55, RT700])
def test_small_model_fits(small, target):
    prog, fit = small[target]
    memory = prog.report.memory
    assert fit == []
    assert prog.report.summary["memory_fits"] is True
    checked = [r for r in memory["regions"] if "fits" in r]
    assert checked and all(r["fits"] and r["margin"] == r["size"] - r["need"] > 0
                           for r in checked)


@pytest.mark.parametrize("target", [U55, RT700])
def test_big_activation_does_not_fit_sram(big, target):
    prog, fit = big[target]
    summary = prog.report.summary
    sram = next(r for r in prog.report.memory["regions"] if r["name"] == "sram")
    assert summary["memory_fits"] is False and sram["fits"] is False
    assert summary["tightest_region"] == "sram"
    assert summary["tightest_margin_bytes"] == sram["margin"] == sram["size"] - sram["need"] < 0
    assert sram["need"] >= prog.report.memory["ram"]["planned_total"] > sram["size"] // 2
    assert len(fit) == 1
    assert "sram" in fit[0] and f"{sram['size']:,}" in fit[0] and f"{sram['need']:,}" in fit[0]
    assert f"{-sram['margin']:,} bytes more" in fit[0] and "To fit:" in fit[0]


def test_strict_compile_raises():
    x = (torch.randn(1, 1, 768, 1024),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(MemoryFitError, match="imxrt700's sram"):
            mcu_npu.compile(BigActivation().eval(), x, target=RT700, calibration=[x],
                            strict=True)


def test_check_fit_strict_and_warning_carry_the_same_message(big):
    report = big[U55][0].report
    with pytest.raises(MemoryFitError) as raised:
        check_fit(report, strict=True)
    with pytest.warns(UserWarning) as warned:
        check_fit(report, strict=False)
    assert str(raised.value) == str(warned[0].message)
    with pytest.warns(UserWarning, match="does not fit"):  # read from the .pte alone
        check_fit(mcu_npu.load(big[U55][0].buffer).report, strict=False)


# --- figures from the program -----------------------------------------------------------
def _delegate_payloads(buffer) -> list[bytes]:
    program = Program(buffer)._pte.program
    return [bytes(program.backend_delegate_data[d.processed.index].data)
            for plan in program.execution_plan for d in plan.delegates]


@pytest.mark.parametrize("target", [U55, RT700])
def test_figures_match_the_program(small, target):
    prog = small[target][0]
    memory = prog.report.memory
    plan = Program(prog.buffer)._pte.program.execution_plan[0]
    assert memory["flash"]["program"] == len(prog.buffer) == prog.report.summary["flash_bytes"]
    assert memory["ram"]["planned"] == list(plan.non_const_buffer_sizes)
    assert memory["ram"]["planned"][0] == 0  # memory id 0 is reserved
    assert memory["ram"]["inputs"] == 3 * 8 * 8 * 4 and memory["ram"]["outputs"] == 10 * 4
    payloads = _delegate_payloads(prog.buffer)
    assert memory["flash"]["npu_payloads"] == sum(map(len, payloads))
    assert memory == mcu_npu.load(prog.buffer).report.memory  # read from the .pte alone


def test_vela_scratch_is_the_payloads(small):
    prog = small[U55][0]
    (payload,) = _delegate_payloads(prog.buffer)
    stream = ethosu_payload.parse(payload)
    memory = prog.report.memory
    assert memory["ram"]["npu_scratch"] == ethosu_payload.align(stream.scratch_size)
    assert stream.scratch_size == prog.report.partitions[0].stats["scratch_bytes"]
    assert memory["flash"]["npu_weights"] == len(stream.weight_data)
    assert memory["flash"]["npu_commands"] == len(stream.cmd_data)
    assert memory["ram"]["npu_scratch_estimated"] is False


def test_neutron_scratch_is_read_from_the_microcode_header():
    words = [0] * 13
    words[0], words[6], words[7] = neutron_payload.MAGIC, 13 * 4, 32
    words[9], words[10], words[11], words[12] = 1000, 0, 1, 1  # scratch, SRAM weights, IO
    blob = neutron_payload.compose(neutron_payload.NeutronPayload(
        num_input_args=1, input_formats=(0,), output_formats=(0,), input_map=(0,),
        output_map=(0,), version=0, microcode=struct.pack("<13I", *words),
        weights=bytes(32), kernels=b""))
    figures = payload_figures("NeutronBackend", blob)
    # scratch 16-aligned, plus the input and output pointer arrays (1 and 1 + 3 entries)
    assert figures["scratch"] == 1008 + 4 + 16 and figures["weights"] == 32
    assert figures["in_place"] is True  # no SRAM-weights buffer: weights read in place


def test_unknown_target_gives_nothing(small):
    report = small[RT700][0].report
    assert memory_report(small[RT700][0].buffer, None, type(report)(
        target="no-such-board", npu_compiler="reference", ops=[], partitions=[])) == {}


def test_text_shows_regions_and_misfit(big):
    text = "\n".join(memory_lines(big[RT700][0].report.memory))
    assert "program+ram" in text and "NO" in text and "(estimate)" in text
    assert memory_lines({}) == []
