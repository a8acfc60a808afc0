"""NXP: the i.MX RT700 (eIQ Neutron N3-64), the MCX N947 (eIQ Neutron N1-16) and the
i.MX 93 (Arm Ethos-U65-256 driven by its Cortex-M33)."""

from __future__ import annotations

from .arm import ethos_u, vela_ini
from .spec import CpuSpec, MemoryRegion, NeutronLimits, NpuKind, NpuSpec, Target

_KIB = 1024
_MIB = 1024 * _KIB
_NO_FLASH = ("'Neutron compute has no access to FLASH' (ExecuTorch backends/nxp/runtime/"
             "NeutronBackend.cpp): NPU weights must be in SRAM, or fetched there by "
             "microcode compiled with fetch_constants_to_sram")

_NEUTRON_RUNTIME = dict(
    bytes_per_cycle=8,
    bandwidth_source="assumed: 8 bytes per NPU cycle (one 64-bit bus to SRAM); NXP publishes "
                     "no Neutron bandwidth",
    runtime_transposes_io=True)
"""What every eIQ Neutron shares: the bandwidth the latency bound assumes, and the runtime's
transposes of flagged delegate I/O (``NeutronBackend.cpp``)."""

# --- i.MX RT700 ------------------------------------------------------------------------------
NEUTRON_N3_64 = NpuSpec(
    kind=NpuKind.NEUTRON,
    name="eIQ Neutron N3-64",
    macs_per_cycle=64,
    clock_hz=325_000_000,
    sram_bytes=7_864_320,  # 7.5 MiB shared on-chip SRAM of the i.MX RT700
    vendor_compiler="neutron",
    limits=NeutronLimits(),
    gelu=False,
    **_NEUTRON_RUNTIME,
    source="N3-64: the variant ExecuTorch's NXP backend supports (backends/nxp/README.md; "
           "NXP AN14700); 64 MACs per cycle derived from ExecuTorch's NSYS config "
           "neutron-imxrt700.ini (num_pipelines 8 x num_macs 8); NPU up to 325 MHz (Zephyr "
           "boards/nxp/mimxrt700_evk/doc/index.rst)",
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
               + _NO_FLASH),
)

# --- MCX N947 --------------------------------------------------------------------------------
NEUTRON_N1_16 = NpuSpec(
    kind=NpuKind.NEUTRON,
    name="eIQ Neutron N1-16",
    macs_per_cycle=16,
    clock_hz=150_000_000,
    sram_bytes=512 * _KIB,
    vendor_compiler="neutron",
    vendor_target="mcxn94x",
    limits=NeutronLimits(),
    gelu=False,
    **_NEUTRON_RUNTIME,
    source="16 MACs per cycle: 'the accelerator in the MCX-N, a 150-MHz microcontroller, "
           "offers 16 MACs per cycle' (EE Times on the i.MX 95 Neutron, "
           "https://larkbiz.biz/i-mx-95-uses-in-house-npu-ip/); 4.8 GOPS = 16 MACs x 2 x "
           "150 MHz (elecfans.com/d/2717103.html). NPU clock: the 150 MHz system clock (the "
           "same article; a separate NPU clock is not published). Operator limits: NXP "
           "publishes none for N1; these are the N3 checks of ExecuTorch's NXP backend, whose "
           "NeutronTargetSpec accepts N3 only. Converter target 'mcxn94x': the eIQ "
           "converter's target list as quoted by a third party (not verified here)",
)

MCXN947_MEMORY = (
    MemoryRegion(
        name="sram", kind="sram", size_bytes=512 * _KIB, npu_access=True, holds=("ram",),
        source="512 KB RAM (Zephyr boards/nxp/frdm_mcxn947/doc/index.rst; NXP MCX N94x "
               "block diagram MCX-N94X-N54X.pdf). Which banks the NPU reaches is not "
               "published in the sources read here; all of it is counted"),
    MemoryRegion(
        name="flash", kind="flash", size_bytes=2 * _MIB, npu_access=False,
        holds=("program",),
        source="2 MB dual-bank on-chip flash (same sources). Whether the N1 Neutron reads "
               "flash is not published; treated as the RT700's Neutron: " + _NO_FLASH),
)

# --- i.MX 93 ---------------------------------------------------------------------------------
_IMX93_NPU_SRAM = 96 * _KIB

IMX93_MEMORY = (
    MemoryRegion(
        name="ocram", kind="sram", size_bytes=_IMX93_NPU_SRAM, npu_access=True,
        holds=("fast_scratch",),
        source="the on-chip SRAM the NPU uses for temporary buffers: 0x20480000, 0x18000 = "
               "96 KiB, 'larger than 96KB, but that is all that is available to non-secure "
               "world' (mainline Linux arch/arm64/boot/dts/freescale/imx93.dtsi, 'sram' node "
               "referenced by the npu@4a900000 node, R. Herring's patch); Vela's arena cache "
               "(Dedicated_Sram, arena_cache_size 96 KiB)"),
    MemoryRegion(
        name="ddr", kind="external", size_bytes=None, npu_access=True,
        holds=("program", "ram"),
        source="DRAM on the board (its type and size are the board's choice); the Ethos-U65 reads "
               "and writes it over its second AXI port (Vela [Memory_Mode.Dedicated_Sram]: "
               "const and arena on Axi1 = Dram)"),
    MemoryRegion(
        name="m33-tcm", kind="tcm", size_bytes=256 * _KIB, npu_access=False,
        source="256 KB tightly coupled memory of the Cortex-M33 (i.MX 93 feature table, "
               "Cortex-M33 core platform, as quoted at https://pastebin.com/fj4benb4); NPU "
               "access to it is not published"),
)

PRESETS = (
    Target(
        name="imxrt700",
        description="NXP i.MX RT700: eIQ Neutron N3-64 NPU + Cortex-M33 @ 325 MHz",
        npu=NEUTRON_N3_64,
        cpu=CpuSpec(core="cortex-m33", clock_hz=325_000_000, int8_kernels=True,
                    source="Cortex-M33 CPU0 up to 325 MHz (Zephyr boards/nxp/mimxrt700_evk/"
                           "doc/index.rst)"),
        memory=IMXRT700_MEMORY,
    ),
    Target(
        name="mcxn947",
        description="NXP MCX N947: eIQ Neutron N1-16 NPU + Cortex-M33 @ 150 MHz",
        npu=NEUTRON_N1_16,
        cpu=CpuSpec(core="cortex-m33", clock_hz=150_000_000, int8_kernels=True,
                    source="dual Cortex-M33 up to 150 MHz (NXP MCX-N94X-N54X block diagram; "
                           "Zephyr boards/nxp/frdm_mcxn947/doc/index.rst: PLL0 at 150 MHz)"),
        memory=MCXN947_MEMORY,
    ),
    Target(
        name="imx93",
        description="NXP i.MX 93: Ethos-U65-256 NPU @ 800 MHz + Cortex-M33 @ 250 MHz "
                    "(Vela Dedicated_Sram, 96 KiB OCRAM cache)",
        npu=ethos_u(
            "ethos-u65-256", clock_hz=800_000_000, sram_bytes=_IMX93_NPU_SRAM,
            config_file=vela_ini("nxp"), system_config="IMX93_Ethos_U65",
            memory_mode="Dedicated_Sram", arena_cache_size=_IMX93_NPU_SRAM,
            source="Ethos-U65 in the i.MX 93 (mainline Linux binding npu/arm,ethos.yaml: "
                   "'fsl,imx93-npu', 'arm,ethos-u65'). 256 MACs: the U65 comes in 256 and 512 "
                   "(Arm, eenewseurope.com); the i.MX 93's count is not stated in the sources "
                   "read here (256 is the configuration the preset assumes). Clock: 800 MHz, the "
                   "ML clock mainline Linux imx93.dtsi assigns (assigned-clock-rates; 1 GHz "
                   "is quoted elsewhere and not confirmed here). Vela: vela/nxp.ini "
                   "[System_Config.IMX93_Ethos_U65]"),
        cpu=CpuSpec(core="cortex-m33", clock_hz=250_000_000, int8_kernels=True,
                    source="Cortex-M33 CPU operating up to 250 MHz (i.MX 93 feature "
                           "table, as quoted at https://pastebin.com/fj4benb4)"),
        memory=IMX93_MEMORY,
    ),
)
"""NXP's presets."""
