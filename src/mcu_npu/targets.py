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
    (``device_io``). The value is the name messages print."""

    NEUTRON = "neutron"
    """NXP eIQ Neutron (device runtime ``NeutronBackend``)."""
    ETHOS_U = "ethos-u"
    """Arm Ethos-U (device runtime ``EthosUBackend``)."""

    def __str__(self) -> str:
        return self.value


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


@dataclass(frozen=True, kw_only=True)
class Target:
    """A preset a user names: an NPU, the CPU beside it and a one-line description."""

    name: str
    description: str
    npu: NpuSpec
    cpu: CpuSpec | None = None


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
                  npu=npu)


_PRESETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            name="imxrt700",
            description="NXP i.MX RT700: eIQ Neutron N3-64 NPU + Cortex-M33 @ 325 MHz",
            npu=NEUTRON_N3_64,
            cpu=CpuSpec(core="cortex-m33", clock_hz=325_000_000, int8_kernels=True),
        ),
        Target(
            name="corstone-300",
            description="Arm Corstone-300: Ethos-U55-128 NPU + Cortex-M55 (clocks from "
                        "Vela's Ethos_U55_High_End_Embedded: 500 MHz)",
            npu=ethos_u("ethos-u55-128"),
            cpu=CpuSpec(core="cortex-m55", clock_hz=500_000_000, int8_kernels=True),
        ),
        Target(
            name="corstone-320",
            description="Arm Corstone-320: Ethos-U85-256 NPU + Cortex-M85 (clocks from "
                        "Vela's Ethos_U85_SYS_DRAM_Mid: 1 GHz)",
            npu=ethos_u("ethos-u85-256"),
            cpu=CpuSpec(core="cortex-m85", clock_hz=1_000_000_000, int8_kernels=True),
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
