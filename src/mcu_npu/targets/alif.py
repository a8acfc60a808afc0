"""Alif Semiconductor Ensemble E3 and E7: each has two Cortex-M55 subsystems with their own
Ethos-U55, the High-Performance one (RTSS-HP: 400 MHz, U55-256) and the High-Efficiency
one (RTSS-HE: 160 MHz, U55-128), one preset each. Both subsystems share the bulk SRAM0/1 and
the MRAM; each has its own TCMs. Vela: vela/alif.ini (Alif's own system configs)."""

from __future__ import annotations

from .arm import ethos_u, vela_ini
from .spec import CpuSpec, MemoryRegion, Target

_KIB = 1024
_ZEPHYR_ALIF = "github.com/alifsemi/zephyr_alif dts/arm/alif/ensemble/"
_MLEK = ("github.com/alifsemi/alif_ml-embedded-evaluation-kit scripts/cmake/platforms/alif/"
         "AE722F80F55D5/")
_SUBSYSTEMS = {
    # subsystem: (CPU clock, U55 MACs, DTCM KiB, Alif's Vela system config)
    "hp": (400_000_000, 256, 1024, "RTSS_HP_SRAM_MRAM"),
    "he": (160_000_000, 128, 256, "RTSS_HE_SRAM_MRAM"),
}
_DFP_E7 = ("github.com/alifsemi/alif_ensemble-cmsis-dfp Device/E7/AE722F80F55D5XX/"
           "linker_script/GCC/gcc_M55_{SUB}.ld MEMORY")
_PARTS = {
    # series: (part, MRAM bytes, where the SRAM0/1 and MRAM sizes come from)
    "e3": ("AE302F80F5582", 5632 * _KIB,
           f"{_ZEPHYR_ALIF}e3/ae302f80f5582xx.dtsi sram0, sram1, mram_flash"),
    "e7": ("AE722F80F55D5", 0x57F000,
           _DFP_E7 + " (MRAM: __ROM_SIZE 0x57F000, the 5.5 MiB MRAM less its top 4 KiB); "
           f"the same sizes in {_MLEK}rtss_{{sub}}/RTSS-{{SUB}}.ld"),
}


def _memory(series: str, sub: str) -> tuple[MemoryRegion, ...]:
    _, mram, where = _PARTS[series]
    sizes = where.format(sub=sub, SUB=sub.upper())
    dtcm_kib = _SUBSYSTEMS[sub][2]
    rtss = f"{_ZEPHYR_ALIF}common/ensemble_rtss_{sub}.dtsi"
    return (
        MemoryRegion(
            name="itcm", kind="tcm", size_bytes=256 * _KIB, npu_access=False,
            source=f"256 KiB ({rtss}); Alif's kit keeps code there. Whether the NPU reads "
                   "the ITCM is not published"),
        MemoryRegion(
            name="dtcm", kind="tcm", size_bytes=dtcm_kib * _KIB, npu_access=True,
            source=f"{dtcm_kib} KiB ({rtss}), also on the global map (global_base); the "
                   "NPU reaches it: Alif's ensemble_vela.ini has "
                   f"RTSS_{sub.upper()}_DTCM_* system configs with the DTCM on AXI0"),
        MemoryRegion(
            name="sram1", kind="sram", size_bytes=2560 * _KIB, npu_access=True,
            holds=("ram",),
            source=f"2560 KiB at 0x08000000 ({sizes}); Alif's kit puts the NPU's tensor "
                   f"arena here (.bss.NoInit.activation_buf_sram, {_MLEK}rtss_{sub}/"
                   f"RTSS-{sub.upper()}.ld); 'all SRAM banks are accessible by any master "
                   "in the system' (Alif white paper 'RAM Regions and Linker Files in Alif "
                   "Microcontrollers')"),
        MemoryRegion(
            name="sram0", kind="sram", size_bytes=4096 * _KIB, npu_access=True,
            source=f"4096 KiB at 0x02000000 ({sizes}); the kit keeps camera and display "
                   "frame buffers here"),
        MemoryRegion(
            name="mram", kind="flash", size_bytes=mram, npu_access=True,
            holds=("program",),
            source=f"{mram:,} bytes at 0x80000000 ({sizes}), shared by both subsystems' "
                   "images; Alif's kit places the model (nn_model) here and Alif's Vela "
                   "configs put the MRAM on the NPU's AXI1 (RTSS_*_SRAM_MRAM)"),
    )


def _preset(series: str, sub: str) -> Target:
    clock, macs, _, system = _SUBSYSTEMS[sub]
    part = _PARTS[series][0]
    label = {"hp": "High-Performance", "he": "High-Efficiency"}[sub]
    npu_source = (
        f"Ethos-U55-{macs} on RTSS-{sub.upper()}: 'HE cores (rtss_he): U55 supports 128 MACs "
        "only; HP cores (rtss_hp): U55 supports 256 MACs only' and the E3/E7 DK build "
        f"commands with ETHOSU_TARGET_NPU_CONFIG=ethos-u55-{macs} (github.com/alifsemi/"
        "sdk-alif samples/modules/tflite-micro/tflm_ethosu/README.rst); NPU clock "
        f"{clock // 1_000_000} MHz: core_clock of Alif's [System_Config.{system}] "
        "(alif_ml-embedded-evaluation-kit scripts/vela/ensemble_vela.ini, copied into "
        "vela/alif.ini)")
    return Target(
        name=f"alif-{series}-{sub}",
        description=f"Alif Ensemble {series.upper()} ({part}) {label} subsystem: "
                    f"Ethos-U55-{macs} + Cortex-M55 @ {clock // 1_000_000} MHz",
        npu=ethos_u(f"ethos-u55-{macs}", clock_hz=clock, sram_bytes=2560 * _KIB,
                    config_file=vela_ini("alif"), system_config=system,
                    memory_mode="Shared_Sram", source=npu_source),
        cpu=CpuSpec(core="cortex-m55", clock_hz=clock, int8_kernels=True,
                    source=f"RTSS-{sub.upper()}: Cortex-M55 up to {clock // 1_000_000} MHz "
                           f"({_ZEPHYR_ALIF}common/ensemble_rtss_{sub}.dtsi clock-frequency; "
                           "Zephyr boards/alif/ensemble_e8_dk/doc/index.rst)"),
        memory=_memory(series, sub),
    )


PRESETS = tuple(_preset(series, sub) for series in ("e3", "e7") for sub in ("hp", "he"))
"""alif-e3-hp, alif-e3-he, alif-e7-hp, alif-e7-he."""
