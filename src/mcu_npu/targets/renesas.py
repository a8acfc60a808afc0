"""Renesas RA8P1 (EK-RA8P1): a Cortex-M85 at 1 GHz with an Ethos-U55, beside a Cortex-M33.
Renesas publishes no Vela system config in the sources read here; Arm's
Ethos_U55_High_End_Embedded (Vela's Arm/vela.ini) already runs the NPU at 500 MHz."""

from __future__ import annotations

from .arm import ethos_u
from .spec import CpuSpec, MemoryRegion, Target

_KIB = 1024
_MIB = 1024 * _KIB
_EK_DOC = "Zephyr boards/renesas/ek_ra8p1/doc/index.rst"

RA8P1_MEMORY = (
    MemoryRegion(
        name="cm85-tcm", kind="tcm", size_bytes=256 * _KIB, npu_access=False,
        source=f"'256 KB of CM85 TCM RAM' of the 2 MB SRAM ({_EK_DOC}); its ITCM/DTCM split "
               "and NPU access are not published in the sources read here"),
    MemoryRegion(
        name="sram", kind="sram", size_bytes=1664 * _KIB, npu_access=True, holds=("ram",),
        source=f"'1664 KB of user SRAM', usable range 0x2200_0000 ... 0x221A_0000 ({_EK_DOC}; "
               "Zephyr splits it between the two cores by default); the NPU's arena (Vela "
               "Shared_Sram: arena on AXI0 = SRAM)"),
    MemoryRegion(
        name="mram", kind="flash", size_bytes=1 * _MIB, npu_access=True,
        holds=("program",),
        source=f"'Up to 1 MB MRAM', usable range 0x0200_0000 ... 0x0210_0000 ({_EK_DOC}). "
               "That the NPU reads it in place is an assumption (Vela Shared_Sram: constants "
               "on AXI1); Renesas does not say so in the sources read here"),
    MemoryRegion(
        name="ospi-flash", kind="flash", size_bytes=64 * _MIB, npu_access=True,
        source=f"512 Mb (64 MB) external Octo-SPI flash on the EK-RA8P1 ({_EK_DOC}); NPU "
               "access through the OSPI's memory-mapped window is assumed, not published"),
)

PRESETS = (
    Target(
        name="ra8p1",
        description="Renesas RA8P1 (EK-RA8P1): Ethos-U55-256 NPU @ 500 MHz + Cortex-M85 "
                    "@ 1 GHz",
        npu=ethos_u(
            "ethos-u55-256", sram_bytes=1664 * _KIB,
            system_config="Ethos_U55_High_End_Embedded", memory_mode="Shared_Sram",
            source="Arm Ethos-U55 NPU (" + _EK_DOC + "); '256 GOPS AI performance' (RT-Thread "
                   "Titan Board README, github.com/RT-Thread-Studio/sdk-bsp-ra8p1-titan-board; "
                   "Renesas' RA8P1 announcement). MACs and NPU clock are not published in the "
                   "sources read here: 256 MACs x 2 ops x 500 MHz = 256 GOPS is the reading the "
                   "preset assumes. Vela: Arm/vela.ini [System_Config."
                   "Ethos_U55_High_End_Embedded] (core_clock 500 MHz)"),
        cpu=CpuSpec(core="cortex-m85", clock_hz=1_000_000_000, int8_kernels=True,
                    source="Cortex-M85 running up to 1 GHz (" + _EK_DOC + "); a 250 MHz "
                           "Cortex-M33 sits beside it"),
        memory=RA8P1_MEMORY,
    ),
)
"""Renesas' presets."""
