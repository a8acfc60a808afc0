"""Where the program lives: ``compile(..., memory=)``, the placements a target offers, the
choice of ``"auto"`` from the memory map, and the placement travelling with the program
(report, ``.pte``, C header)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import warnings

import pytest
import torch
from torch import nn

import mcu_npu
from helpers import run_cli
from mcu_npu.cli import EXIT_ERROR
from mcu_npu.errors import ConfigError, MemoryFitError
from mcu_npu.targets import get_target

ARM_GCC = shutil.which("arm-none-eabi-gcc")


class Mlp(nn.Module):
    """About 200 KiB of int8 weights and small activations: the weights decide where the
    program fits."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(256, 384), nn.Linear(384, 256), nn.Linear(256, 16)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


def _samples(n=8):
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(1, 256, generator=gen),) for _ in range(n)]


def _compile(target, **kwargs):
    torch.manual_seed(0)
    cal = _samples()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = mcu_npu.compile(Mlp().eval(), cal[0], target=target, calibration=cal, **kwargs)
    return prog, [str(w.message) for w in caught if "does not fit" in str(w.message)]


def _small_sram(kib: int):
    """corstone-300 with its SRAM cut to ``kib`` KiB."""
    t = get_target("corstone-300")
    memory = tuple(dataclasses.replace(r, size_bytes=kib * 1024) if r.name == "sram" else r
                   for r in t.memory)
    return dataclasses.replace(t, memory=memory)


@pytest.fixture(scope="module")
def auto300():
    return _compile("corstone-300")[0]


@pytest.fixture(scope="module")
def flash300():
    return _compile("corstone-300", memory="flash")[0]


def test_placements_per_target_and_what_they_set():
    c300, c320, rt = (get_target(n) for n in ("corstone-300", "corstone-320", "imxrt700"))
    assert c300.placements == ("flash", "sram") and c300.default_placement == "flash"
    assert c320.placements == ("flash", "sram", "dedicated-sram")
    assert rt.placements == ("sram",)
    assert c300.placed("sram").npu.vela.memory_mode == "Sram_Only"
    assert c300.placed("sram").region_for("program").name == "sram"
    assert c300.placed("flash").npu.vela.memory_mode == "Shared_Sram"
    assert c300.placed("flash").region_for("program").name == "ddr"
    dedicated = c320.placed("dedicated-sram")
    assert dedicated.npu.vela.memory_mode == "Dedicated_Sram"
    assert dedicated.npu.vela.arena_cache_size == c320.npu.sram_bytes
    assert dedicated.region_for("fast_scratch").name == "sram"
    assert dedicated.region_for("ram").name == "ddr"
    assert rt.placed("sram").region_for("program").name == "sram"
    with pytest.raises(ConfigError, match="cannot place the program in 'dedicated-sram'"):
        c300.placed("dedicated-sram")


def test_auto_picks_the_fastest_placement_that_fits(auto300, flash300):
    placement = auto300.report.placement
    assert placement["asked"] == "auto" and placement["memory"] == "sram"
    tried = {row["memory"]: row for row in placement["tried"]}
    assert set(tried) == {"sram", "flash"} and all(r["fits"] for r in tried.values())
    assert tried["sram"]["latency_us"] < tried["flash"]["latency_us"]
    assert auto300.report.latency["latency_us"] == tried["sram"]["latency_us"]
    assert auto300.report.memory["program_in"] == "sram"
    assert auto300.report.summary["memory_placement"] == "sram"
    flash = flash300
    assert flash.report.placement == {
        "memory": "flash", "asked": "flash", "why": "asked for",
        "tried": flash.report.placement["tried"]}
    assert flash.report.memory["program_in"] == "ddr"
    # the estimate of the placement not lowered is the lowering's own figure, but for the
    # rounding of the CPU rows the report keeps (3 decimals each)
    assert tried["flash"]["latency_us"] == pytest.approx(
        flash.report.latency["latency_us"], abs=0.01)
    assert flash.report.latency["latency_us"] > auto300.report.latency["latency_us"]
    for (x,) in _samples(3):  # the memory mode changes where bytes live, not what is computed
        assert torch.equal(auto300.run(x)[0], flash.run(x)[0])


def test_the_placement_travels_with_the_program(auto300, tmp_path):
    auto300.save(tmp_path / "m.pte")
    assert mcu_npu.load(tmp_path / "m.pte").report.placement == auto300.report.placement
    (tmp_path / "m.ptd").unlink()
    alone = mcu_npu.load(tmp_path / "m.pte").report
    assert alone.placement == {"memory": "sram"}
    assert alone.memory["program_in"] == "sram"
    assert "placement: sram" in str(alone)
    text = str(auto300.report)
    assert "placement: sram (auto: the lowest latency that fits)" in text
    assert "flash" in text.split("placement: sram")[1]
    assert "does not fit" not in text
    html = auto300.report.to_html()
    assert "Memory placement <b>sram</b>" in html and "need per region" in html


def test_a_small_sram_gets_the_flash_placement_and_sram_asked_warns():
    target = _small_sram(64)
    prog, misfits = _compile(target)
    assert prog.report.placement["memory"] == "flash" and not misfits
    tried = {row["memory"]: row for row in prog.report.placement["tried"]}
    assert not tried["sram"]["fits"] and tried["sram"]["shortfall"] > 0
    assert prog.report.placement["why"] == "the only placement that fits"
    # the weights alone exceed the SRAM: flash is lowered, sram only estimated from it
    assert tried["sram"].get("estimated") and not tried["flash"].get("estimated")
    assert [row["memory"] for row in prog.report.placement["tried"]] == ["sram", "flash"]
    flash, _ = _compile(target, memory="flash")  # auto lowered flash again: the same program
    assert prog.buffer == flash.buffer and prog.host_data == flash.host_data
    prog, misfits = _compile(target, memory="sram")
    assert len(misfits) == 1 and "the corstone-300's sram" in misfits[0]
    shortfall = tried["sram"]["shortfall"]  # what auto measured missing there
    assert f"{shortfall:,} bytes more than the region holds" in misfits[0]
    with pytest.raises(MemoryFitError, match="sram"):
        _compile(target, memory="sram", strict=True)


def test_nothing_fits_keeps_the_smallest_shortfall_and_strict_raises():
    t = _small_sram(1)
    target = dataclasses.replace(t, memory=tuple(
        dataclasses.replace(r, size_bytes=64 * 1024) if r.name == "ddr" else r
        for r in t.memory))
    prog, misfits = _compile(target)
    assert prog.report.placement["why"] == "nothing fits: the smallest shortfall"
    assert misfits
    with pytest.raises(MemoryFitError):
        _compile(target, strict=True)


def test_unknown_or_unavailable_placements_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="unknown memory placement 'rom'"):
        _compile("corstone-300", memory="rom")
    with pytest.raises(ConfigError, match="corstone-300 cannot place the program in "
                                          "'dedicated-sram'"):
        _compile("corstone-300", memory="dedicated-sram")
    out = tmp_path / "o.pte"
    r = run_cli("compile", "examples/digits.py:calibrated", "--target", "imxrt700",
                "--memory", "flash", "-o", str(out))
    assert r.returncode == EXIT_ERROR and not out.exists()
    lines = [line for line in r.stderr.splitlines() if not line.startswith("[")]  # progress
    assert len(lines) == 1 and "imxrt700 cannot place the program in 'flash'" in lines[0]


@pytest.mark.skipif(ARM_GCC is None, reason="arm-none-eabi-gcc is not installed")
@pytest.mark.parametrize("memory", ["sram", "flash"])
def test_the_c_header_section_follows_the_placement(auto300, flash300, memory, tmp_path):
    prog = auto300 if memory == "sram" else flash300
    region = {"sram": "sram", "flash": "ddr"}[memory]
    path = prog.save_c_header(tmp_path / "model_pte.h")
    text = path.read_text()
    assert f'section(".{region}.model_pte")' in text
    assert f'#define MODEL_PTE_PLACEMENT "{memory}"' in text
    assert f'#define MODEL_PTE_PROGRAM_REGION "{region}"' in text
    assert '#define MODEL_PTE_RAM_REGION "sram"' in text
    (tmp_path / "use.c").write_text('#include "model_pte.h"\n')
    obj = tmp_path / "use.o"
    subprocess.run([ARM_GCC, "-mcpu=cortex-m55", "-mthumb", "-std=c11", "-O2", "-c", "-o",
                    str(obj), str(tmp_path / "use.c")], check=True, cwd=tmp_path)
    sections = subprocess.run(["arm-none-eabi-readelf", "-S", "-W", str(obj)], check=True,
                              capture_output=True, text=True).stdout
    row = next(line for line in sections.splitlines() if f" .{region}.model_pte " in line)
    fields = row.split("]", 1)[1].split()
    assert int(fields[4], 16) == len(prog.buffer)
