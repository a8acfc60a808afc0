"""Himax WiseEye2 (HX6538, on Seeed's Grove Vision AI V2): a Cortex-M55 at 400 MHz with an
Ethos-U55-64. Vela: vela/himax.ini (the values of Seeed's published Vela file)."""

from __future__ import annotations

from .arm import ethos_u, vela_ini
from .spec import CpuSpec, MemoryRegion, Target

_KIB = 1024
_LD = ("github.com/HimaxWiseEyePlus/Seeed_Grove_Vision_AI_Module_V2 EPII_CM55M_APP_S/app/"
       "scenario_app/tflm_yolov8_od/TFLM_yolov8_od_S_only.ld MEMORY")
_SEEED_VELA = ("Seeed's Vela file for the Grove Vision AI V2 (files.seeedstudio.com/sscma/"
               "configs/vela_config.ini, My_Sys_Cfg / My_Mem_Mode_Parent)")

WE2_MEMORY = (
    MemoryRegion(name="itcm", kind="tcm", size_bytes=256 * _KIB, npu_access=False,
                 source=f"CM55M_S_APP_ROM, 0x10000000, 256 KiB ({_LD}): code; NPU access not "
                        "published"),
    MemoryRegion(name="dtcm", kind="tcm", size_bytes=256 * _KIB, npu_access=False,
                 source=f"CM55M_S_APP_DATA, 0x30000000, 256 KiB ({_LD}): data, heap, stack; "
                        "NPU access not published"),
    MemoryRegion(
        name="sram", kind="sram", size_bytes=2048 * _KIB, npu_access=True, holds=("ram",),
        source=f"CM55M_S_SRAM: 2 MiB of SRAM0 + SRAM1 from 0x34000000, of which the 2nd-stage "
               f"loader takes 0x1F000 ({_LD}); Himax's examples put the tensor arena here and "
               f"the NPU's AXI0 is SRAM ({_SEEED_VELA})"),
    MemoryRegion(
        name="flash", kind="flash", size_bytes=None, npu_access=True, holds=("program",),
        source="external SPI flash read in place (XIP): Himax's examples flash models to "
               "fixed flash offsets (README of the repository above, xmodem --model) and "
               f"Seeed's Vela file puts constants on AXI1 = OffChipFlash ({_SEEED_VELA}). "
               "Its size is the module's choice and not published by Himax in the sources "
               "read here"),
)

PRESETS = (
    Target(
        name="himax-we2",
        description="Himax WiseEye2 HX6538: Ethos-U55-64 NPU @ 400 MHz + Cortex-M55 @ 400 MHz",
        npu=ethos_u(
            "ethos-u55-64", clock_hz=400_000_000, sram_bytes=2048 * _KIB,
            config_file=vela_ini("himax"), system_config="Himax_WE2",
            memory_mode="Shared_Sram",
            source="Ethos-U55-64: --accelerator-config ethos-u55-64 in Seeed's and Himax's "
                   f"model guides for the WE2; clock 400 MHz: core_clock of {_SEEED_VELA}, "
                   "copied into vela/himax.ini [System_Config.Himax_WE2]"),
        cpu=CpuSpec(core="cortex-m55", clock_hz=400_000_000, int8_kernels=True,
                    source="WiseEye2 HX6538: dual Cortex-M55, high-performance core at "
                           "400 MHz, high-efficiency core at 150 MHz, Ethos-U55 at 400 MHz "
                           "(Grove Vision AI V2 specifications as quoted in a public project "
                           "write-up; Himax's datasheet was not read here)"),
        memory=WE2_MEMORY,
    ),
)
"""Himax's presets."""
