"""Arm: the Ethos-U family (``ethos_u``, with upstream ExecuTorch's Vela defaults), the
Corstone-300/-320 reference systems and every Ethos-U configuration named alone."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .spec import CpuSpec, MemoryRegion, NpuKind, NpuSpec, Target, VelaConfig

# Vela's system config and memory mode per Ethos-U family: the ExecuTorch Arm backend's
# defaults. Clocks are core_clock of those sections in Vela's Arm/vela.ini.
_VELA_SYSTEMS = {
    "ethos-u55": ("Ethos_U55_High_End_Embedded", "Shared_Sram", 500_000_000),
    "ethos-u65": ("Ethos_U65_High_End", "Dedicated_Sram_384KB", 1_000_000_000),
    "ethos-u85": ("Ethos_U85_SYS_DRAM_Mid", "Sram_Only", 1_000_000_000),
}
# SRAM the NPU may use: the arena sizes the ExecuTorch Arm tests give Vela
# (2 MiB on the Corstone FVPs; the 384 KiB of the U65 Dedicated_Sram_384KB mode).
_SRAM_BYTES = {"ethos-u55": 2 * 1024 * 1024, "ethos-u65": 384 * 1024,
               "ethos-u85": 2 * 1024 * 1024}


# --- memory maps ---------------------------------------------------------------------------
_MIB = 1024 * 1024
_VELA_INI = "Vela's config_files/Arm/vela.ini"
_ET_ARM_LD = "ExecuTorch examples/arm/executor_runner/{}.ld MEMORY"
_ETHOSU_AXI = ("the Ethos-U reads and writes over its AXI ports: SRAM on the first, flash "
               "or DRAM on the second (Arm ml-embedded-evaluation-kit "
               "docs/sections/memory_considerations.md)")
_TCM = ("tightly coupled to the Cortex-M core, off the NPU's AXI ports; the ExecuTorch Arm "
        "runner keeps code, stack and .rodata here")


def vela_memory(vela: VelaConfig, sram_bytes: int) -> tuple[MemoryRegion, ...]:
    """The memory map Vela's memory mode describes, for an NPU named without its SoC: the
    arena (Vela's scratch, which also holds the NPU's inputs and outputs) where the mode puts
    it, sized by ``sram_bytes`` when that is SRAM; memories behind the second AXI port have
    no size (the board's choice)."""
    mode = vela.memory_mode
    where = f"{_VELA_INI} [Memory_Mode.{mode}]"
    if mode == "Sram_Only":  # constants, arena and cache all on AXI0 (SRAM)
        return (MemoryRegion(
            name="sram", kind="sram", size_bytes=sram_bytes, npu_access=True,
            holds=("program", "ram"),
            source=f"{where}: const, arena and cache on Axi0 = Sram; size: the arena "
                   "ExecuTorch's Arm tests give Vela (targets.arm._SRAM_BYTES)"),)
    if mode.startswith("Dedicated_Sram"):  # arena in DRAM, its cache in the NPU's SRAM
        return (
            MemoryRegion(name="sram", kind="sram",
                         size_bytes=vela.arena_cache_size or sram_bytes, npu_access=True,
                         holds=("fast_scratch",),
                         source=f"{where}: cache on Axi0 = Sram, arena_cache_size "
                                f"{sram_bytes} bytes"),
            MemoryRegion(name="dram", kind="external", size_bytes=None, npu_access=True,
                         holds=("program", "ram"),
                         source=f"{where}: const and arena on Axi1 = Dram"),
        )
    return (  # Shared_Sram: arena and cache in SRAM, constants read from flash
        MemoryRegion(name="sram", kind="sram", size_bytes=sram_bytes, npu_access=True,
                     holds=("ram",),
                     source=f"{where}: arena and cache on Axi0 = Sram; size: the arena "
                            "ExecuTorch's Arm tests give Vela (targets.arm._SRAM_BYTES)"),
        MemoryRegion(name="flash", kind="flash", size_bytes=None, npu_access=True,
                     holds=("program",),
                     source=f"{where}: const on Axi1 = OffChipFlash "
                            "([System_Config.Ethos_U55_High_End_Embedded])"),
    )


CORSTONE_300_MEMORY = (
    MemoryRegion(name="itcm", kind="tcm", size_bytes=512 * 1024, npu_access=False,
                 source=f"{_ET_ARM_LD.format('Corstone-300')} ITCM 0x00080000; {_TCM}"),
    MemoryRegion(name="dtcm", kind="tcm", size_bytes=512 * 1024, npu_access=False,
                 source=f"{_ET_ARM_LD.format('Corstone-300')} DTCM 0x00080000; {_TCM}"),
    MemoryRegion(name="sram", kind="sram", size_bytes=2 * _MIB, npu_access=True,
                 holds=("ram",),
                 source=f"{_ET_ARM_LD.format('Corstone-300')} SRAM 0x00200000 (SSE-300 "
                        "ISRAM); the arena of Vela's Shared_Sram mode, where the runner "
                        f"puts .bss.tensor_arena with ETHOSU_ARENA=0; {_ETHOSU_AXI}"),
    MemoryRegion(name="qspi-flash", kind="flash", size_bytes=8 * _MIB, npu_access=True,
                 source=f"{_ET_ARM_LD.format('Corstone-300')} QSPI 0x00800000"),
    MemoryRegion(name="ddr", kind="external", size_bytes=0x60000000, npu_access=True,
                 holds=("program",),
                 source=f"{_ET_ARM_LD.format('Corstone-300')} DDR 0x60000000; the runner "
                        "puts the model (network_model_sec) here by default "
                        f"(ETHOSU_MODEL=1); {_ETHOSU_AXI}"),
)

CORSTONE_320_MEMORY = (
    MemoryRegion(name="itcm", kind="tcm", size_bytes=32 * 1024, npu_access=False,
                 source=f"{_ET_ARM_LD.format('Corstone-320')} ITCM 0x00008000; {_TCM}"),
    MemoryRegion(name="dtcm", kind="tcm", size_bytes=32 * 1024, npu_access=False,
                 source=f"{_ET_ARM_LD.format('Corstone-320')} DTCM 0x00008000; {_TCM}"),
    MemoryRegion(name="sram", kind="sram", size_bytes=4 * _MIB, npu_access=True,
                 holds=("ram",),
                 source=f"{_ET_ARM_LD.format('Corstone-320')} SRAM 0x00400000; the "
                        "runner's .bss.tensor_arena with ETHOSU_ARENA=0; " + _ETHOSU_AXI),
    MemoryRegion(name="qspi-flash", kind="flash", size_bytes=8 * _MIB, npu_access=True,
                 source=f"{_ET_ARM_LD.format('Corstone-320')} QSPI 0x00800000"),
    MemoryRegion(name="ddr", kind="external", size_bytes=0x10000000, npu_access=True,
                 holds=("program",),
                 source=f"{_ET_ARM_LD.format('Corstone-320')} DDR 0x10000000; the runner "
                        "puts the model (network_model_sec) here by default "
                        f"(ETHOSU_MODEL=1); {_ETHOSU_AXI}"),
)


def ethos_u(accelerator: str, *, clock_hz: int | None = None, sram_bytes: int | None = None,
            system_config: str | None = None, memory_mode: str | None = None,
            config_file: str | None = None, arena_cache_size: int | None = None,
            name: str | None = None, source: str | None = None) -> NpuSpec:
    """An Ethos-U from Vela's accelerator name ("ethos-u55-128"), with the family's defaults
    (upstream ExecuTorch's Vela system config and memory mode); a board preset gives its own
    clock, SRAM, Vela sections and configuration file (``vela_ini``) instead.

    MACs per cycle are the number after the last dash, summed over cores: Vela builds the
    U65-512 from two 256-MAC cores.
    """
    family, _, macs = accelerator.rpartition("-")
    if family not in _VELA_SYSTEMS or not macs.isdigit():
        raise ConfigError(f"unknown Ethos-U configuration {accelerator!r}; expected "
                          f"<{'|'.join(_VELA_SYSTEMS)}>-<MACs>")
    system, memory, clock = _VELA_SYSTEMS[family]
    vela = VelaConfig(accelerator=accelerator, system_config=system_config or system,
                      memory_mode=memory_mode or memory, arena_cache_size=arena_cache_size,
                      **({"config_file": config_file} if config_file else {}))
    default_source = (f"MACs: the number in Vela's accelerator name ({_VELA_INI} "
                      f"accelerator_configs); clock: core_clock of {_VELA_INI} "
                      f"[System_Config.{system}], upstream ExecuTorch's default for "
                      f"{family} (backends/arm/ethosu/compile_spec.py)")
    return NpuSpec(
        kind=NpuKind.ETHOS_U,
        name=name or f"Arm Ethos-U{family[-2:]}-{macs}",
        source=source or default_source,
        macs_per_cycle=int(macs),
        clock_hz=clock_hz or clock,
        sram_bytes=sram_bytes or _SRAM_BYTES[family],
        vendor_compiler="vela",
        int16_activations=True,
        int16_sigmoid_tanh_q3_12=True,
        compiler_checks_operators=True,
        vela=vela,
        transpose_as_block_swap=family == "ethos-u55",
        compact_means=True,
        table_softmax=True,
        bytes_per_cycle=16,
        bandwidth_source="assumed: Ethos-U's two 64-bit AXI ports, 16 bytes per cycle",
    )


def vela_ini(vendor: str) -> str:
    """The path of this package's Vela configuration file for ``vendor`` (vela/<vendor>.ini):
    the system configs and memory modes of boards that Vela's own Arm/vela.ini does not
    describe."""
    return str(Path(__file__).with_name("vela") / f"{vendor}.ini")


def _npu_only(accelerator: str) -> Target:
    npu = ethos_u(accelerator)
    vela = npu.vela
    return Target(name=accelerator,
                  description=f"{npu.name} NPU alone (Vela {vela.system_config} / "
                              f"{vela.memory_mode}, {npu.clock_hz // 1_000_000} MHz)",
                  npu=npu, memory=vela_memory(vela, npu.sram_bytes))


PRESETS = (
    Target(
        name="corstone-300",
        description="Arm Corstone-300: Ethos-U55-128 NPU + Cortex-M55 (clocks from "
                    "Vela's Ethos_U55_High_End_Embedded: 500 MHz)",
        npu=ethos_u("ethos-u55-128"),
        cpu=CpuSpec(core="cortex-m55", clock_hz=500_000_000, int8_kernels=True,
                    source="Corstone-300 (SSE-300) is built around a Cortex-M55 (Arm AN547); "
                           "its clock here is the NPU's, Vela's 500 MHz (the FVP has none)"),
        memory=CORSTONE_300_MEMORY,
    ),
    Target(
        name="corstone-320",
        description="Arm Corstone-320: Ethos-U85-256 NPU + Cortex-M85 (clocks from "
                    "Vela's Ethos_U85_SYS_DRAM_Mid: 1 GHz)",
        npu=ethos_u("ethos-u85-256"),
        cpu=CpuSpec(core="cortex-m85", clock_hz=1_000_000_000, int8_kernels=True,
                    source="Corstone-320 pairs the Ethos-U85 with a Cortex-M85 (ExecuTorch "
                           "examples/arm, Corstone-320 FVP); its clock here is the NPU's, "
                           "Vela's 1 GHz (the FVP has none)"),
        memory=CORSTONE_320_MEMORY,
    ),
    *(_npu_only(a) for a in ("ethos-u55-64", "ethos-u55-128", "ethos-u55-256",
                             "ethos-u65-256", "ethos-u65-512", "ethos-u85-256",
                             "ethos-u85-512")),
)
"""Arm's Corstone reference systems and each Ethos-U configuration alone."""
