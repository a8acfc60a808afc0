"""Published whole-model latencies on Cortex-M CPUs that ground the cycle model
(``cpu_cycles``), with their sources.

All are MLPerf Tiny closed-division median throughputs (inferences per second, from the
``results.txt`` of each performance run; latency = 1 / throughput) of the benchmark's int8
models: KWS = DS-CNN (``mlperf_tiny.ds_cnn``), VWW = MobileNetV1-0.25 (``mobilenet_v1_025``),
IC = ResNet-8 (``resnet8``), AD = the dense autoencoder (``fc_autoencoder``). Paths are in
the public repositories github.com/mlcommons/tiny_results_v<version>.

``REFERENCE`` names the figure set each core's MAC coefficients were fitted to; the others
are kept to show the spread between inference engines on the same core.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Published:
    """One published latency: a model on a board's CPU, with the software that ran it."""

    model: str
    """Factory name in ``mcu_npu.models.mlperf_tiny``."""
    board: str
    core: str
    clock_hz: int
    engine: str
    inferences_per_s: float
    source: str

    @property
    def latency_us(self) -> float:
        return 1e6 / self.inferences_per_s

    @property
    def cycles(self) -> float:
        """Cycles per inference at the board's clock (the figure that scales to a clock)."""
        return self.clock_hz / self.inferences_per_s

    def at_clock_us(self, clock_hz: int) -> float:
        """The latency scaled linearly to ``clock_hz`` (memory wait states ignored)."""
        return self.cycles / clock_hz * 1e6


_TASKS = {"kws": "ds_cnn", "vww": "mobilenet_v1_025", "ic": "resnet8", "ad": "fc_autoencoder"}


def _set(board, core, clock_hz, engine, repo, path, throughputs):
    return [Published(_TASKS[task], board, core, clock_hz, engine, value,
                      f"github.com/mlcommons/{repo} {path.format(task=task)}")
            for task, value in throughputs.items()]


STM32U575 = _set(
    "NUCLEO-U575ZI-Q (STM32U575)", "cortex-m33", 160_000_000, "X-CUBE-AI 10.2",
    "tiny_results_v1.3",
    "closed/STMicroelectronics/results/NUCLEO_U575ZI_Q/{task}/performance/results.txt",
    {"kws": 34.489, "vww": 16.873, "ic": 9.133, "ad": 311.579})
EK_RA6M4 = _set(
    "EK-RA6M4 (R7FA6M4AF3CFB)", "cortex-m33", 200_000_000, "TFLite Micro + CMSIS-NN (2021)",
    "tiny_results_v0.7", "closed/renesas/results/EK-RA6M4/{task}/performance/results.txt",
    {"kws": 19.774, "vww": 6.159, "ic": 4.062, "ad": 216.772})
NRF5340 = _set(
    "nRF5340 DK", "cortex-m33", 128_000_000, "microTVM + CMSIS-NN (2022)",
    "tiny_results_v1.1",
    "closed/Krai/results/NRF5340-DK_MICROTVM-CMSIS-NN/{task}/performance/results.txt",
    {"kws": 13.074, "vww": 4.286, "ic": 3.146, "ad": 159.020})
EK_RA8D1 = _set(
    "EK-RA8D1 (R7FA8D1AHECBD)", "cortex-m85", 480_000_000, "TFLite Micro + CMSIS-NN (Helium)",
    "tiny_results_v1.2", "closed/Renesas/results/EK-RA8D1/{task}/performance/results.txt",
    {"kws": 288.611, "vww": 74.665, "ic": 117.948, "ad": 1884.138})

FIGURES: list[Published] = [*STM32U575, *EK_RA6M4, *NRF5340, *EK_RA8D1]

REFERENCE = {"cortex-m33": STM32U575, "cortex-m85": EK_RA8D1}
"""The figure set each core's MAC coefficients were fitted to (the Cortex-M55 borrows the
M85's: no MLPerf Tiny result names a Cortex-M55)."""

TOLERANCE = 0.30
"""Largest relative error of the model against a reference figure that the tests accept."""


@dataclass(frozen=True)
class KernelFigure:
    """One published cycle count of a single CPU kernel call, with its source."""

    kernel: str
    """The kernel class of ``cpu_cycles`` it measures ("quantize", ...)."""
    op: str
    core: str
    board: str
    elements: int
    cycles: int
    source: str

    @property
    def per_element(self) -> float:
        return self.cycles / self.elements


KERNEL_FIGURES: list[KernelFigure] = [
    KernelFigure(
        "quantize", "cortex_m::quantize_per_tensor.out (ExecuTorch's Cortex-M backend)",
        "cortex-m55", "Alif Ensemble E8, high-performance Cortex-M55",
        3 * 224 * 224, 1_365_831,
        "github.com/pytorch/executorch/issues/17651, comment of 2026-03-03: ETDump cycles "
        "of torchvision MobileNetV2 (float 1x3x224x224 input) on the Alif E8 HP core"),
]
"""Per-kernel figures found published. None was found for a transpose or a dequantize on
these cores (nor CMSIS-DSP / CMSIS-NN tables giving them): those terms stay assumed."""

KERNEL_FACTOR = 1.5
"""Largest ratio between the cycle model's cost of a published kernel call and the
published cycles (either way) that the tests accept."""
