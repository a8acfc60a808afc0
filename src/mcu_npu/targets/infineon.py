"""Infineon PSOC Edge E84: a Cortex-M55 with an Ethos-U55 (the application CPU), beside a
Cortex-M33 with Infineon's NNLite accelerator (not modelled). Vela: vela/infineon.ini."""

from __future__ import annotations

from .arm import ethos_u, vela_ini
from .spec import CpuSpec, MemoryRegion, Target

_KIB = 1024
_MIB = 1024 * _KIB
_QT = ("Qt for MCUs, Infineon PSOC Edge E84 Evaluation Kit board features "
       "(doc.qt.io/QtForMCUs/qtul-instructions-psoc-edge-e84.html)")

PSE84_MEMORY = (
    MemoryRegion(name="itcm", kind="tcm", size_bytes=256 * _KIB, npu_access=False,
                 source=f"256 KB ITCM ({_QT}); NPU access not published"),
    MemoryRegion(name="dtcm", kind="tcm", size_bytes=256 * _KIB, npu_access=False,
                 source=f"256 KB DTCM ({_QT}); NPU access not published"),
    MemoryRegion(
        name="socmem", kind="sram", size_bytes=5120 * _KIB, npu_access=True, holds=("ram",),
        source=f"5120 KB System SRAM (SoCMEM) ({_QT}); the NPU's arena here is the preset's "
               "choice (the largest SRAM); which SRAMs the NPU reaches is not published in "
               "the sources read here"),
    MemoryRegion(name="sram", kind="sram", size_bytes=1 * _MIB, npu_access=True,
                 source=f"1 MB SRAM ({_QT})"),
    MemoryRegion(name="rram", kind="flash", size_bytes=512 * _KIB, npu_access=True,
                 source=f"512 KB on-chip RRAM ({_QT}); parts of it hold the boot and secure "
                        "images (SEGGER wiki 'Infineon PSoC Edge E8': up to 356 KB "
                        "programmable)"),
    MemoryRegion(
        name="octal-flash", kind="flash", size_bytes=64 * _MIB, npu_access=True,
        holds=("program",),
        source=f"external 128 MB Octal SPI flash, '64 MB usable in XIP mode' ({_QT}); NPU "
               "reads over the XIP window are assumed (Vela Shared_Sram: constants on AXI1), "
               "not published"),
)

PRESETS = (
    Target(
        name="psoc-edge-e84",
        description="Infineon PSOC Edge E84: Ethos-U55-128 NPU + Cortex-M55 @ 400 MHz",
        npu=ethos_u(
            "ethos-u55-128", clock_hz=400_000_000, sram_bytes=5120 * _KIB,
            config_file=vela_ini("infineon"), system_config="PSOC_Edge_E84",
            memory_mode="Shared_Sram",
            source="Arm Ethos-U55 beside the Cortex-M55 (Zephyr boards/infineon/"
                   "kit_pse84_eval/doc/index.rst). Its MAC count and clock are not published "
                   "in the sources read here: 128 MACs is the configuration the preset "
                   "assumes, the clock the Cortex-M55's 400 MHz. Vela: vela/infineon.ini "
                   "[System_Config.PSOC_Edge_E84] (Arm's U55 High_End memory figures)"),
        cpu=CpuSpec(core="cortex-m55", clock_hz=400_000_000, int8_kernels=True,
                    source="Cortex-M55 clock-frequency 400000000 (Zephyr dts/arm/infineon/"
                           "edge/pse84/pse84.cm55.dtsi)"),
        memory=PSE84_MEMORY,
    ),
)
"""Infineon's presets."""
