"""The target dataclasses: NPU, CPU, memory region and SoC preset, and where a program can
live in a preset's memory map (``Target.placed``).

Support checks read their limits from these fields; nothing in the converter or the
partitioner branches on a target's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..errors import ConfigError


class NpuKind(str, Enum):
    """A built-in NPU family (``npu.families``: its device runtime, compiler and the rules
    by which delegate data reaches the NPU). The value is the name messages print."""

    NEUTRON = "neutron"
    """NXP eIQ Neutron (device runtime ``NeutronBackend``)."""
    ETHOS_U = "ethos-u"
    """Arm Ethos-U (device runtime ``EthosUBackend``)."""

    def __str__(self) -> str:
        return self.value


_REGISTERED_KINDS: set[str] = set()
"""Kinds of NPU families registered beside the built-in ones (``npu.families.register``)."""


def accept_npu_kind(name: str) -> None:
    """Let ``NpuSpec.kind`` name a registered NPU family that is not an ``NpuKind``."""
    if name not in {k.value for k in NpuKind}:
        _REGISTERED_KINDS.add(name)


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
    min_align_corners_input: int = 2
    """Smallest input height and width of a resize with align_corners."""
    max_view_rank: int = 7

    def takes_transpose(self, shape, perm) -> bool:
        """Whether the Neutron converter runs a TRANSPOSE of a tensor of ``shape`` by
        ``perm`` correctly: one that moves no data (a reshape), or batch 1 NCHW -> NHWC with
        W, C and H * W multiples of ``num_macs``, or NHWC -> NCHW with C, H * W (so H * W * C)
        multiples of it. The rule of NXP's ExecuTorch backend
        (``backends/nxp/backend/neutron_operator_support.py``,
        ``transposition_is_supported_on_neutron``): the NPU transposes two groups of axes as
        a matrix, and gives wrong results outside these sizes."""
        shape, perm = [int(d) for d in shape], [int(p) for p in perm]
        moved = [p for p in perm if shape[p] != 1]
        if moved == sorted(moved):
            return True
        if len(shape) != 4 or shape[0] != 1:
            return False
        m = self.num_macs
        if perm == [0, 2, 3, 1]:  # NCHW -> NHWC
            _, c, h, w = shape
            return w % m == 0 and c % m == 0 and (h * w) % m == 0
        if perm == [0, 3, 1, 2]:  # NHWC -> NCHW
            _, h, w, c = shape
            return c % m == 0 and (h * w) % m == 0
        return False


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

    kind: NpuKind | str
    """NPU family (its value, "neutron" or "ethos-u", is accepted too; a family registered
    with ``npu.families.register`` is named by its kind string)."""
    name: str
    macs_per_cycle: int
    clock_hz: int
    sram_bytes: int
    vendor_compiler: str
    """The ``npu_compiler`` that ``"auto"`` picks when its tool is installed: "neutron" (NXP's
    eIQ Neutron converter) or "vela" (Arm's Vela)."""
    vendor_target: str = ""
    """The name the vendor compiler knows this NPU's SoC by (the eIQ Neutron converter's target,
    e.g. "mcxn94x"); "" takes the preset's name."""
    compiler_checks_operators: bool = False
    """The vendor compiler decides on its own which operators it runs and can refuse some the
    converter's checks accept (Vela), so the partitioner asks it about every proposed
    partition before partitioning."""
    limits: NeutronLimits | None = None
    """Operator limits the converter's checks apply (Neutron's); None when there are none
    beyond what the converter itself supports."""
    vela: VelaConfig | None = None
    """Set for Ethos-U NPUs: what the Vela compiler needs to know."""
    source: str = ""
    """Where the MAC count, the clock and the configuration come from (what is not published
    says so)."""
    transpose_as_block_swap: bool = False
    """Emit a transpose that swaps two blocks of axes (NCHW <-> NHWC) as a 3-D TRANSPOSE
    between reshapes: Vela schedules that in fewer cycles on the U55 (ResNet-8: 201,786
    against 202,938 total cycles), while on the U65 and U85 the 4-D TRANSPOSE is the cheaper
    one (U85 MobileNetV1: 198,936 against 3,233,950, the 3-D one being memory bound)."""
    compact_means: bool = False
    """Emit means in the forms Vela encodes without a window of weights: Vela makes a MEAN
    a depthwise convolution with all-ones weights of window x depth bytes. A mean over height
    and width that keeps its input's quantization becomes an AVERAGE_POOL_2D (no weights);
    another mean over the leading axes of a tensor the MEAN over the height of its
    ``[1, reduced, channels, 1]`` view (depth 1: ``reduced`` bytes; DS-CNN's global mean
    over 25x5x64: 125 bytes instead of 8,000, ``tflite/ops/reduce.py``)."""

    table_softmax: bool = False
    """Emit a classifier's final int8 softmax as a chain of tables (max, exp, a sum, 1/s,
    multiply) instead of TFLite's SOFTMAX, which Vela builds from TFLite's fixed-point
    algorithm (15 operations on the U85, 28 on the U55): 3.2 KB of flash less on the U85-256,
    2.1 KB on the U55-128, for up to about C/2 output steps of error on C classes, the order
    kept (``tflite/ops/softmax.py``)."""

    bytes_per_cycle: int = 8
    """Bytes the NPU moves per cycle, for the latency bound where its compiler gives no cycle
    estimate (``report.latency``); ``bandwidth_source`` says where the figure comes from."""
    bandwidth_source: str = "assumed: 8 bytes per cycle"
    runtime_transposes_io: bool = False
    """The device runtime transposes a delegate input or output on the CPU where the
    payload's format flag says so (``NeutronBackend``: NCHW <-> NHWC); otherwise it copies
    the bytes as they lie (``EthosUBackend``). The converter weighs a transpose in the graph
    against it; the latency model charges it to the CPU."""

    gelu: bool = True
    """The NPU runs GELU (TFLite GELU: a table on every Ethos-U). eIQ Neutron has no GELU
    operator: there a model's GELUs run as an approximation built of operators it has where
    the whole model's accuracy allows it (``flow.approximate``), else on the CPU."""

    int16_activations: bool = False
    """The NPU runs 16x8 kernels (int16 activations, int8 weights) for the operators whose
    converter entries say so (``tflite.registry.Operator.int16``): Vela compiles them for
    every Ethos-U; NXP's eIQ Neutron converter takes int8 only."""
    int16_sigmoid_tanh_q3_12: bool = False
    """int16 sigmoid and tanh run on an activation unit that rescales their input to Q3.12
    (Vela's, on every Ethos-U), where the host runs LiteRT's int16 kernels (interpolated
    tables): the two can differ by a few 1/32768 steps, and the report says so."""

    def __post_init__(self):
        if self.kind in _REGISTERED_KINDS:
            return
        try:
            object.__setattr__(self, "kind", NpuKind(self.kind))
        except ValueError:
            known = [k.value for k in NpuKind] + sorted(_REGISTERED_KINDS)
            raise ConfigError(f"unknown NPU kind {self.kind!r}; expected one of: "
                              f"{', '.join(known)}") from None


@dataclass(frozen=True, kw_only=True)
class CpuSpec:
    """The Cortex-M core that runs what the NPU does not."""

    core: str
    clock_hz: int
    int8_kernels: bool = False
    """The ops the NPU leaves run as ExecuTorch's Cortex-M int8 (CMSIS-NN) kernels, quantized
    with the Cortex-M rules where the NPU's do not apply; False keeps ExecuTorch's portable
    kernels for them."""
    source: str = ""
    """Where the core and its clock come from."""


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
