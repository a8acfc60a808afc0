"""Hardware targets as data: one frozen dataclass per NPU, CPU and SoC preset.

Support checks read their limits from these fields; nothing in the converter or the
partitioner branches on a target's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .errors import ConfigError


class NpuKind(str, Enum):
    """An NPU family; its device runtime decides how delegate data reaches the NPU
    (``device.delegate_io``). The value is the name messages print."""

    NEUTRON = "neutron"
    """NXP eIQ Neutron (device runtime ``NeutronBackend``)."""
    ETHOS_U = "ethos-u"
    """Arm Ethos-U (device runtime ``EthosUBackend``)."""

    def __str__(self) -> str:
        return self.value

    @property
    def device_backend(self) -> str:
        """The id the device runtime registers its backend under: what a ``.pte`` names
        as its delegates' backend (``backend.delegate``'s ``device_id``)."""
        return {"neutron": "NeutronBackend", "ethos-u": "EthosUBackend"}[self.value]


@dataclass(frozen=True, kw_only=True)
class NeutronLimits:
    """Operator limits of the eIQ Neutron NPU (from NXP's ExecuTorch backend checks)."""

    num_macs: int = 8
    """Channel granule: conv input channels are padded to a multiple of this."""
    max_kernel_stride_dilation: int = 4096
    max_conv_weight_volume: int = 65535
    """kernel height * width * ceil(in_channels, num_macs) must not exceed this."""
    max_softmax_channels: int = 2040
    max_softmax_rows: int = 4096
    max_softmax_elements: int = 524288
    max_pool_kernel_stride: int = 4096
    max_view_rank: int = 7


@dataclass(frozen=True, kw_only=True)
class VelaConfig:
    """How Arm's Vela compiler is told about an Ethos-U system.

    The names select sections of Vela's configuration file; clocks, AXI ports and memory
    latencies live there, not here.
    """

    accelerator: str
    """Vela's accelerator configuration, e.g. "ethos-u55-128"."""
    system_config: str
    """``[System_Config.<name>]`` section: NPU clock, AXI ports, memory speeds."""
    memory_mode: str
    """``[Memory_Mode.<name>]`` section: where constants, the arena and the cache live."""
    config_file: str = "Arm/vela.ini"
    """Relative to Vela's ``config_files`` directory, or a path to an .ini file."""
    arena_cache_size: int | None = None
    """Bytes of arena cache Vela may plan for; None keeps the memory mode's value."""


@dataclass(frozen=True, kw_only=True)
class NpuSpec:
    """An NPU: its family, what compiles for it, its configuration and the numbers estimates
    need."""

    kind: NpuKind
    """NPU family (its value, "neutron" or "ethos-u", is accepted too)."""
    name: str
    macs_per_cycle: int
    clock_hz: int
    sram_bytes: int
    vendor_compiler: str
    """The ``npu_compiler`` that ``"auto"`` picks when its tool is installed: "neutron" (NXP's
    eIQ Neutron converter) or "vela" (Arm's Vela)."""
    compiler_checks_operators: bool = False
    """The vendor compiler decides on its own which operators it runs and can refuse some the
    converter's checks accept (Vela), so the partitioner asks it about every proposed
    partition before partitioning."""
    limits: NeutronLimits | None = None
    """Operator limits the converter's checks apply (Neutron's); None when there are none
    beyond what the converter itself supports."""
    vela: VelaConfig | None = None
    """Set for Ethos-U NPUs: what the Vela compiler needs to know."""
    transpose_as_block_swap: bool = False
    """Emit a transpose that swaps two blocks of axes (NCHW <-> NHWC) as a 3-D TRANSPOSE
    between reshapes: Vela schedules that in fewer cycles on the U55 (ResNet-8: 201,786
    against 202,938 total cycles), while on the U65 and U85 the 4-D TRANSPOSE is the cheaper
    one (U85 MobileNetV1: 198,936 against 3,233,950, the 3-D one being memory bound)."""

    int16_activations: bool = False
    """The NPU runs 16x8 kernels (int16 activations, int8 weights) for the operators whose
    converter entries say so (``tflite.registry.Operator.int16``): Vela compiles them for
    every Ethos-U; NXP's eIQ Neutron converter takes int8 only."""
    int16_sigmoid_tanh_q3_12: bool = False
    """int16 sigmoid and tanh run on an activation unit that rescales their input to Q3.12
    (Vela's, on every Ethos-U), where the host runs LiteRT's int16 kernels (interpolated
    tables): the two can differ by a few 1/32768 steps, and the report says so."""

    def __post_init__(self):
        try:
            object.__setattr__(self, "kind", NpuKind(self.kind))
        except ValueError:
            raise ConfigError(f"unknown NPU kind {self.kind!r}; expected one of: "
                              f"{', '.join(k.value for k in NpuKind)}") from None


@dataclass(frozen=True, kw_only=True)
class CpuSpec:
    """The Cortex-M core that runs what the NPU does not."""

    core: str
    clock_hz: int
    int8_kernels: bool = False
    """The ops the NPU leaves run as ExecuTorch's Cortex-M int8 (CMSIS-NN) kernels, quantized
    with the Cortex-M rules where the NPU's do not apply; False keeps ExecuTorch's portable
    kernels for them."""


MEMORY_KINDS = ("sram", "tcm", "flash", "external")
MEMORY_ROLES = ("program", "ram", "fast_scratch")
"""What a region holds in the firmware layout the memory report checks: ``program`` the
``.pte`` (constant, read in place), ``ram`` what the program writes (ExecuTorch's planned
buffers, the method allocator's pool, the NPU scratch), ``fast_scratch`` Vela's fast
scratch (the arena cache of its Dedicated_Sram memory modes)."""


@dataclass(frozen=True, kw_only=True)
class MemoryRegion:
    """One memory of a target: its kind, size, whether the NPU reaches it, what the firmware
    keeps there (``holds``, names from ``MEMORY_ROLES``) and where the figures come from."""

    name: str
    kind: str
    """One of ``MEMORY_KINDS``."""
    size_bytes: int | None
    """None: the size is the board's choice (memory behind an AXI port of Vela's system
    config); the report shows the need and checks nothing."""
    npu_access: bool
    """The NPU can read this region (an NPU that cannot must find its weights elsewhere)."""
    source: str
    holds: tuple[str, ...] = ()

    def __post_init__(self):
        if self.kind not in MEMORY_KINDS:
            raise ConfigError(f"memory region {self.name!r}: unknown kind {self.kind!r}; "
                              f"expected one of: {', '.join(MEMORY_KINDS)}")
        object.__setattr__(self, "holds", tuple(self.holds))
        unknown = [h for h in self.holds if h not in MEMORY_ROLES]
        if unknown:
            raise ConfigError(f"memory region {self.name!r}: unknown roles {unknown}; "
                              f"expected some of: {', '.join(MEMORY_ROLES)}")


@dataclass(frozen=True, kw_only=True)
class Target:
    """A preset a user names: an NPU, the CPU beside it and a one-line description."""

    name: str
    description: str
    npu: NpuSpec
    cpu: CpuSpec | None = None
    memory: tuple[MemoryRegion, ...] = ()
    """The memory map the memory report checks the program against (empty: not checked)."""
    placement: str = ""
    """Where the program lives (one of ``PLACEMENTS``; "" for the preset's default,
    ``default_placement``): ``placed`` sets it, with the NPU compiler's memory settings and
    the map's roles to match."""

    def region_for(self, role: str) -> MemoryRegion | None:
        """The region that holds ``role`` (a name from ``MEMORY_ROLES``), None if none does."""
        return next((r for r in self.memory if role in r.holds), None)

    @property
    def default_placement(self) -> str:
        """The placement the preset's NPU settings describe: its Vela memory mode's (upstream
        ExecuTorch's default for the family); the program in SRAM for a Neutron NPU, which
        reads no flash."""
        if self.npu.vela is None:
            return "sram"
        mode = self.npu.vela.memory_mode
        return "dedicated-sram" if mode.startswith("Dedicated_Sram") else \
            _PLACEMENT_OF_MODE.get(mode, "flash")

    @property
    def placements(self) -> tuple[str, ...]:
        """The placements this target can be compiled for: for an Ethos-U, Vela's memory
        modes (Dedicated_Sram only where the NPU has the AXI ports for it, not the U55); for
        a Neutron NPU, the program in SRAM (keeping its weights in flash needs NXP's
        converter's ``fetch_constants_to_sram``, which the reference compiler does not
        model)."""
        if self.npu.vela is None:
            return ("sram",)
        dedicated = not self.npu.vela.accelerator.startswith("ethos-u55")
        return ("flash", "sram") + (("dedicated-sram",) if dedicated else ())

    @property
    def memory_placement(self) -> str:
        """The placement in force: ``placement`` or, when unset, the default."""
        return self.placement or self.default_placement

    def placed(self, placement: str) -> "Target":
        """This target with the program placed as ``placement`` ("": this target as it is):
        the Vela memory mode that tells the NPU compiler where its weights and arena live,
        and the memory map's roles moved to the regions that hold them then."""
        from dataclasses import replace

        if not placement or placement == self.placement:
            return self
        if placement not in self.placements:
            raise ConfigError(f"target {self.name} cannot place the program in "
                              f"{placement!r}; it can: {', '.join(self.placements)}")
        npu = self.npu
        if npu.vela is not None and placement != self.default_placement:
            npu = replace(npu, vela=replace(
                npu.vela, memory_mode=_MODE_OF_PLACEMENT[placement],
                arena_cache_size=npu.sram_bytes if placement == "dedicated-sram" else None))
        return replace(self, npu=npu, memory=_moved_roles(self.memory, placement),
                       placement=placement)


PLACEMENTS = ("flash", "sram", "dedicated-sram")
"""Where a program can live: ``flash`` (the NPU reads its weights in place, from flash or
off-chip memory), ``sram`` (the whole program in SRAM), ``dedicated-sram`` (program and
arena off-chip, the NPU's SRAM a cache of the arena: Vela's Dedicated_Sram)."""
MEMORY_CHOICES = ("auto", *PLACEMENTS)
_MODE_OF_PLACEMENT = {"flash": "Shared_Sram", "sram": "Sram_Only",
                      "dedicated-sram": "Dedicated_Sram"}
_PLACEMENT_OF_MODE = {"Shared_Sram": "flash", "Sram_Only": "sram",
                      "Dedicated_Sram": "dedicated-sram"}


def _moved_roles(memory: tuple[MemoryRegion, ...], placement: str) -> tuple[MemoryRegion, ...]:
    """``memory`` with its roles where ``placement`` puts them: ``sram`` the program beside
    the RAM in the NPU's SRAM; ``flash`` the program in the off-chip memory the NPU reads
    (the one holding it already, else flash before external); ``dedicated-sram`` program
    and RAM off-chip, Vela's fast scratch in SRAM."""
    from dataclasses import replace

    sram = next((r for r in memory if r.kind == "sram" and r.npu_access), None)
    outside = [r for r in memory if r.kind in ("flash", "external") and r.npu_access]
    home = next((r for r in outside if "program" in r.holds), None) or next(
        (r for r in sorted(outside, key=lambda r: r.kind != "flash")), None)
    if sram is None:
        return memory
    if placement == "sram":
        want = {sram.name: ("program", "ram")}
    elif placement == "flash" and home is not None:
        want = {sram.name: ("ram",), home.name: ("program",)}
    elif placement == "dedicated-sram" and home is not None:
        dram = next((r for r in outside if r.kind == "external"), home)
        want = {sram.name: ("fast_scratch",), dram.name: ("program", "ram")}
    else:
        return memory
    return tuple(replace(r, holds=want.get(r.name, ())) for r in memory)


NEUTRON_N3_64 = NpuSpec(
    kind=NpuKind.NEUTRON,
    name="eIQ Neutron N3-64",
    macs_per_cycle=64,
    clock_hz=325_000_000,
    sram_bytes=7_864_320,  # 7.5 MiB shared on-chip SRAM of the i.MX RT700
    vendor_compiler="neutron",
    limits=NeutronLimits(),
)

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
                   "ExecuTorch's Arm tests give Vela (targets._SRAM_BYTES)"),)
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
                            "ExecuTorch's Arm tests give Vela (targets._SRAM_BYTES)"),
        MemoryRegion(name="flash", kind="flash", size_bytes=None, npu_access=True,
                     holds=("program",),
                     source=f"{where}: const on Axi1 = OffChipFlash "
                            "([System_Config.Ethos_U55_High_End_Embedded])"),
    )


IMXRT700_MEMORY = (
    MemoryRegion(
        name="sram", kind="sram", size_bytes=0x580000, npu_access=True, holds=("ram",),
        source="7.5 MiB on-chip SRAM (0x780000, Zephyr dts/arm/nxp/imxrt/imxrt7xx/"
               "nxp_rt7xx_common.dtsi 'sram' ranges; 'over 7.5 MB' in NXP's RT700 "
               "announcement), shared by both domains. Derived: the compute domain "
               "(Cortex-M33 CPU0, HiFi4, NPU) takes partitions 0x000000-0x57FFFF = 5.5 MiB, "
               "the sense domain (CPU1, HiFi1) 0x580000-0x77FFFF, per the partition comments "
               "of that dtsi"),
    MemoryRegion(
        name="xspi0-flash", kind="flash", size_bytes=64 * _MIB, npu_access=False,
        holds=("program",),
        source="MX25UM51245G octal flash, 64 MiB, on xSPI0 of the MIMXRT700-EVK (Zephyr "
               "boards/nxp/mimxrt700_evk/mimxrt700_evk_mimxrt798s_cm33_cpu0.dts); "
               "'Neutron compute has no access to FLASH' (ExecuTorch backends/nxp/runtime/"
               "NeutronBackend.cpp): NPU weights must be in SRAM, or fetched there by "
               "microcode compiled with fetch_constants_to_sram"),
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


def ethos_u(accelerator: str) -> NpuSpec:
    """An Ethos-U from Vela's accelerator name ("ethos-u55-128"), with the family's defaults.

    MACs per cycle are the number after the last dash, summed over cores: Vela builds the
    U65-512 from two 256-MAC cores.
    """
    family, _, macs = accelerator.rpartition("-")
    if family not in _VELA_SYSTEMS or not macs.isdigit():
        raise ConfigError(f"unknown Ethos-U configuration {accelerator!r}; expected "
                          f"<{'|'.join(_VELA_SYSTEMS)}>-<MACs>")
    system, memory, clock = _VELA_SYSTEMS[family]
    return NpuSpec(
        kind=NpuKind.ETHOS_U,
        name=f"Arm Ethos-U{family[-2:]}-{macs}",
        macs_per_cycle=int(macs),
        clock_hz=clock,
        sram_bytes=_SRAM_BYTES[family],
        vendor_compiler="vela",
        int16_activations=True,
        int16_sigmoid_tanh_q3_12=True,
        compiler_checks_operators=True,
        vela=VelaConfig(accelerator=accelerator, system_config=system, memory_mode=memory),
        transpose_as_block_swap=family == "ethos-u55",
    )


def _npu_only(accelerator: str) -> Target:
    npu = ethos_u(accelerator)
    vela = npu.vela
    return Target(name=accelerator,
                  description=f"{npu.name} NPU alone (Vela {vela.system_config} / "
                              f"{vela.memory_mode}, {npu.clock_hz // 1_000_000} MHz)",
                  npu=npu, memory=vela_memory(vela, npu.sram_bytes))


_PRESETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            name="imxrt700",
            description="NXP i.MX RT700: eIQ Neutron N3-64 NPU + Cortex-M33 @ 325 MHz",
            npu=NEUTRON_N3_64,
            cpu=CpuSpec(core="cortex-m33", clock_hz=325_000_000, int8_kernels=True),
            memory=IMXRT700_MEMORY,
        ),
        Target(
            name="corstone-300",
            description="Arm Corstone-300: Ethos-U55-128 NPU + Cortex-M55 (clocks from "
                        "Vela's Ethos_U55_High_End_Embedded: 500 MHz)",
            npu=ethos_u("ethos-u55-128"),
            cpu=CpuSpec(core="cortex-m55", clock_hz=500_000_000, int8_kernels=True),
            memory=CORSTONE_300_MEMORY,
        ),
        Target(
            name="corstone-320",
            description="Arm Corstone-320: Ethos-U85-256 NPU + Cortex-M85 (clocks from "
                        "Vela's Ethos_U85_SYS_DRAM_Mid: 1 GHz)",
            npu=ethos_u("ethos-u85-256"),
            cpu=CpuSpec(core="cortex-m85", clock_hz=1_000_000_000, int8_kernels=True),
            memory=CORSTONE_320_MEMORY,
        ),
        *(_npu_only(a) for a in ("ethos-u55-64", "ethos-u55-128", "ethos-u55-256",
                                 "ethos-u65-256", "ethos-u65-512", "ethos-u85-256",
                                 "ethos-u85-512")),
    )
}


def targets() -> list[str]:
    """Names of the target presets, sorted."""
    return sorted(_PRESETS)


def get_target(target: str | Target) -> Target:
    """The preset called ``target`` (a Target passes through); ConfigError lists valid names."""
    if isinstance(target, Target):
        return target
    try:
        return _PRESETS[str(target).lower()]
    except KeyError:
        raise ConfigError(
            f"unknown target {target!r}; valid targets: {', '.join(targets())}"
        ) from None
