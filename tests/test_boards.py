"""Board presets (mcu_npu.targets: alif, renesas, infineon, himax, nxp): every figure has a
source, the Vela configuration files shipped for them are the sections Vela reads, and each
board compiles MLPerf Tiny's DS-CNN with its memory map and a placement in the report."""

from __future__ import annotations

import configparser
import functools
from pathlib import Path

import pytest
import torch

import mcu_npu
from mcu_npu.backend.cortex_m import cortex_m_core
from mcu_npu.models.mlperf_tiny import ds_cnn
from mcu_npu.npu.ethos_u.vela_run import architecture, VelaOptions
from mcu_npu.quantization.exact import run_exact
from mcu_npu.estimate.cpu_cycles import core_model
from mcu_npu.estimate.metrics import sqnr_db
from mcu_npu.targets import NpuKind, get_target, targets, vela_ini

from helpers import sqnr_holds

BOARDS = ("alif-e3-hp", "alif-e3-he", "alif-e7-hp", "alif-e7-he", "ra8p1", "psoc-edge-e84",
          "himax-we2", "mcxn947", "imx93")
VELA_DIR = Path(vela_ini("alif")).parent


def _ini(path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    assert parser.read(path) == [str(path)]
    return parser


def test_the_boards_are_listed():
    assert set(BOARDS) <= set(mcu_npu.targets()) == set(targets())


@pytest.mark.parametrize("name", BOARDS)
def test_every_figure_has_a_source(name):
    t = get_target(name)
    assert t.npu.source.strip() and t.cpu.source.strip()
    for region in t.memory:
        assert region.source.strip(), region.name
    assert t.region_for("program") is not None and t.region_for("ram") is not None
    # the CPU runs the NPU's leftovers as int8 Cortex-M kernels, and the latency model
    # knows the core
    assert cortex_m_core(t) == t.cpu.core and core_model(t.cpu.core).name == t.cpu.core


def test_an_unpublished_figure_says_so():
    # the Himax module's flash size is not published: no size, and the source says why
    flash = get_target("himax-we2").region_for("program")
    assert flash.size_bytes is None and "not published" in flash.source


_MEMORIES = ("Sram", "Dram", "OnChipFlash", "OffChipFlash")


def _project_presets():
    """(preset, its .ini) for every preset whose Vela configuration file is this package's."""
    out = []
    for name in targets():
        vela = get_target(name).npu.vela
        if vela is not None and Path(vela.config_file).parent == VELA_DIR:
            out.append((name, Path(vela.config_file)))
    return out


def test_every_project_ini_parses_and_every_system_config_is_used():
    used = {(path.name, get_target(name).npu.vela.system_config)
            for name, path in _project_presets()}
    inis = sorted(VELA_DIR.glob("*.ini"))
    assert [p.name for p in inis] == ["alif.ini", "himax.ini", "infineon.ini", "nxp.ini"]
    for path in inis:
        systems = {s.split(".", 1)[1] for s in _ini(path).sections()
                   if s.startswith("System_Config.")}
        assert systems and {(path.name, s) for s in systems} <= used, path.name


@pytest.mark.parametrize("name,path", _project_presets(), ids=lambda v: str(v).split("/")[-1])
def test_vela_reads_the_project_sections(name, path):
    """Vela's architecture for every placement of the preset carries the figures of the
    preset's [System_Config] and [Memory_Mode] sections: the NPU clock, the AXI ports, each
    memory's latency, burst length and clock scale, and where the mode puts the constants
    and the arena."""
    from ethosu.vela.architecture_features import MemArea

    target = get_target(name)
    ini = _ini(path)
    for placement in target.placements:
        vela = target.placed(placement).npu.vela
        system = ini[f"System_Config.{vela.system_config}"]
        mode = ini[f"Memory_Mode.{vela.memory_mode}"]
        arch = architecture(vela, VelaOptions())
        assert arch.core_clock == float(system["core_clock"]) == target.npu.clock_hz
        if vela.arena_cache_size is not None:  # the NPU's SRAM, Dedicated_Sram's cache
            assert arch.arena_cache_size == vela.arena_cache_size == target.npu.sram_bytes
        assert arch.axi0_port.name == system["axi0_port"]
        for key, value in system.items():
            memory, _, field = key.partition("_")
            memory = next((m for m in _MEMORIES if m.lower() == memory), None)
            if memory is None:
                continue
            area = MemArea[memory]
            got = {"read_latency": arch.memory_latency[area][0],
                   "write_latency": arch.memory_latency[area][1],
                   "burst_length": arch.memory_burst_length[area],
                   "clock_scale": arch.memory_clock_scales[area]}.get(field)
            if got is not None:
                assert got == pytest.approx(float(value)), (name, key)
        assert (arch.arena_mem_area.name, arch.cache_mem_area.name) == \
            (mode["arena_mem_area"], mode["cache_mem_area"])
        # constants on AXI1 live in the memory there; on AXI0 (SRAM), Vela reads them as
        # on-chip flash as fast as the SRAM
        constants = {"Axi1": MemArea[system["axi1_port"]], "Axi0": MemArea.OnChipFlash}
        assert arch.permanent_storage_mem_area == constants[mode["const_mem_area"]]


# --- DS-CNN on every board -------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _compiled(name: str):
    """(float model, program, 8 held-out input tuples) of DS-CNN on ``name``, compiled once
    per test process."""
    model, inputs = ds_cnn()
    g = torch.Generator().manual_seed(0)
    calibration = [tuple(torch.randn(x.shape, generator=g) for x in inputs) for _ in range(16)]
    tests = [tuple(torch.randn(x.shape, generator=g) for x in inputs) for _ in range(8)]
    prog = mcu_npu.compile(model, inputs, target=name, calibration=calibration)
    return model, prog, tests


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xdist_group(f"board-{n}"))
                                  for n in BOARDS])
def test_ds_cnn_compiles_for_the_board(name):
    model, prog, tests = _compiled(name)
    target = get_target(name)
    s = prog.report.summary
    ethos = target.npu.kind is NpuKind.ETHOS_U
    assert s["target"] == name and s["ops_on_cpu"] == 0 and s["partitions"] == 1
    assert s["npu_compiler"] == ("vela" if ethos else "reference")
    if ethos:  # Vela compiled with the preset's system config
        stats = prog.report.partitions[0].stats
        assert (stats["clock_hz"], stats["macs_per_cycle"]) == (target.npu.clock_hz,
                                                                target.npu.macs_per_cycle)
    # the latency model times the NPU at the preset's clock, a Neutron at its MACs per cycle
    npu_row = next(r for r in prog.report.latency["rows"] if r["runs_on"] == "npu")
    # the report gives times to the nanosecond (rounded): within half of one
    assert abs(npu_row["us"] - npu_row["cycles"] / target.npu.clock_hz * 1e6) <= 0.0005 + 1e-9
    if not ethos:
        assert npu_row["cycles"] >= npu_row["work"] / target.npu.macs_per_cycle > 0
        assert f"/ {target.npu.macs_per_cycle} per cycle" in npu_row["basis"]
    # the placement and the board's regions, named and sized as the preset has them
    placement = prog.report.placement
    assert placement["asked"] == "auto" and placement["memory"] in target.placements
    assert {row["memory"] for row in placement["tried"]} == set(target.placements)
    placed = target.placed(placement["memory"])
    want = [(r.name, r.kind, r.size_bytes, list(r.holds)) for r in placed.memory if r.holds]
    regions = prog.report.memory["regions"]
    assert [(r["name"], r["kind"], r["size"], r["holds"]) for r in regions] == want
    assert s["memory_fits"] is True and all(r["fits"] for r in regions if "fits" in r)
    text = str(prog.report)
    assert f"placement: {placement['memory']}" in text
    for r in regions:
        assert r["name"] in text
    # the host run keeps the numerics contract over all outputs of 8 inputs
    with torch.no_grad():
        floats = torch.cat([model(*t).flatten() for t in tests])
        refs = torch.cat([run_exact(prog.reference, *t).flatten() for t in tests])
    runs = torch.cat([prog.run(*t)[0].flatten() for t in tests])
    assert sqnr_holds(sqnr_db(floats, runs), sqnr_db(floats, refs))
