"""Hardware targets as data: one frozen dataclass per NPU, CPU and SoC preset.

Support checks read their limits from these fields; nothing in the converter or the
partitioner branches on a target's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError


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
class NpuSpec:
    """An NPU: its family, configuration and the numbers estimates need."""

    kind: str
    """NPU family: "neutron" (NXP eIQ Neutron) or "ethos-u" (Arm Ethos-U)."""
    name: str
    macs_per_cycle: int
    clock_hz: int
    sram_bytes: int
    limits: NeutronLimits = NeutronLimits()


@dataclass(frozen=True, kw_only=True)
class CpuSpec:
    """The Cortex-M core that runs what the NPU does not."""

    core: str
    clock_hz: int


@dataclass(frozen=True, kw_only=True)
class Target:
    """A preset a user names: an NPU, the CPU beside it and a one-line description."""

    name: str
    description: str
    npu: NpuSpec
    cpu: CpuSpec | None = None


NEUTRON_N3_64 = NpuSpec(
    kind="neutron",
    name="eIQ Neutron N3-64",
    macs_per_cycle=64,
    clock_hz=325_000_000,
    sram_bytes=7_864_320,  # 7.5 MiB shared on-chip SRAM of the i.MX RT700
)

_PRESETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            name="imxrt700",
            description="NXP i.MX RT700: eIQ Neutron N3-64 NPU + Cortex-M33 @ 325 MHz",
            npu=NEUTRON_N3_64,
            cpu=CpuSpec(core="cortex-m33", clock_hz=325_000_000),
        ),
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
