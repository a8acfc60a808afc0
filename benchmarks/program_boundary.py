"""Benchmark: what the program boundary costs on the MLPerf Tiny models, with the default float
NCHW I/O and with the inputs declared as the sensor gives them (``compile(inputs=...)``).

Run::

    PYTHONPATH=src python benchmarks/program_boundary.py
    PYTHONPATH=src python benchmarks/program_boundary.py --models resnet8 --targets imxrt700

Per model and target (imxrt700, corstone-300, corstone-320): the latency model's whole-model
latency, its NPU part and the CPU work converting the program's inputs and outputs
(``report.latency["boundary_us"]``: quantize, dequantize, NCHW<->NHWC transposes), as µs and
as a share of the latency, for

- ``float``: the model as written, float NCHW in, float out (``io="float"``);
- ``sensor``: the camera models (VWW MobileNetV1, IC ResNet-8) take uint8 HWC pixels with a
  per-channel ``(x - mean) / std`` (ImageNet's: a depthwise 1x1 layer on the NPU), the audio
  models (KWS DS-CNN's MFCC, the AD autoencoder's features) int8 features scaled by one std
  (folded into the input's quantization); int8 outputs (``outputs="int8"``);
- ``sensor/255`` (camera models): uint8 HWC pixels scaled by ``1 / 255``, one std for all
  channels, folded into the input's quantization: no normalising op.
- ``sensor/128`` (camera models): uint8 HWC pixels less one integer mean (128) over
  ImageNet's per-channel std: the mean folds into the input's quantization, the 1/std into
  the first convolution's weights (``FoldInputNormalisation``): no normalising op either.

What sensor I/O still costs sits on the NPU, not in the boundary share: a uint8 input's
QUANTIZE to int8 (on the Ethos-U55 about one cycle per element: some 57 µs for
MobileNetV1's 96x96x3 at 500 MHz) and, for per-channel means before a padded first
convolution (both camera models), the 1x1 depthwise layer (about as much again). Folding
those means into the first convolution is not exact (its zero padding would pad the pixels,
not the normalised data), so they stay.

Weights are the random ones of ``mcu_npu.models.mlperf_tiny``; four calibration samples each.
The figures are estimates (``report.latency``'s ``method``). This script prints only.
"""

from __future__ import annotations

import argparse
import warnings

MODELS = ("ds_cnn", "mobilenet_v1_025", "resnet8", "fc_autoencoder")
TARGETS = ("imxrt700", "corstone-300", "corstone-320")
IMAGE_MEAN, IMAGE_STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)


def sensor_case(name: str, shape, n: int):
    """(float samples as the model takes them, raw samples, the ``InputSpec``)."""
    import torch

    from mcu_npu import InputSpec

    g = torch.Generator().manual_seed(1)
    if len(shape) == 4 and shape[1] == 3:  # a camera: uint8 HWC pixels
        raw = [torch.randint(0, 256, (shape[0], shape[2], shape[3], 3), generator=g,
                             dtype=torch.uint8) for _ in range(n)]
        mean = torch.tensor(IMAGE_MEAN).reshape(1, 3, 1, 1)
        std = torch.tensor(IMAGE_STD).reshape(1, 3, 1, 1)
        floats = [(x.permute(0, 3, 1, 2).float() - mean) / std for x in raw]
        spec = InputSpec(dtype="uint8", layout="channels_last", mean=IMAGE_MEAN, std=IMAGE_STD)
    else:  # a front-end's int8 features, scaled by 1/32 for the model
        raw = [torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)
               for _ in range(n)]
        floats = [x.float() / 32 for x in raw]
        spec = InputSpec(dtype="int8", std=(32.0,))
    return [(x,) for x in floats], [(x,) for x in raw], spec


def row(prog) -> dict:
    lat = prog.report.latency
    boundary = lat.get("boundary_us", {}).get("total", 0.0)
    return {"latency": lat["latency_us"], "npu": lat["npu_us"], "boundary": boundary,
            "share": 100 * boundary / lat["latency_us"] if lat["latency_us"] else 0.0}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--targets", nargs="*", default=TARGETS)
    parser.add_argument("--samples", type=int, default=4)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    import mcu_npu
    from mcu_npu import InputSpec
    from mcu_npu.models import mlperf_tiny

    print(f"{'model':<18}{'target':<14}{'I/O':<12}{'latency us':>12}{'NPU us':>10}"
          f"{'boundary us':>13}{'share':>8}")
    for name in args.models:
        model, example = getattr(mlperf_tiny, name)()
        floats, raw, spec = sensor_case(name, tuple(example[0].shape), args.samples)
        for target in args.targets:
            compiled = {
                "float": mcu_npu.compile(model, floats[0], target=target, calibration=floats,
                                         progress=False),
                "sensor": mcu_npu.compile(model, raw[0], target=target, calibration=raw,
                                          inputs=spec, outputs="int8", progress=False),
            }
            if spec.dtype == "uint8":
                per_tensor = InputSpec(dtype="uint8", layout="channels_last", std=(255.0,))
                compiled["sensor/255"] = mcu_npu.compile(
                    model, raw[0], target=target, calibration=raw, inputs=per_tensor,
                    outputs="int8", progress=False)
                one_mean = InputSpec(dtype="uint8", layout="channels_last", mean=(128.0,),
                                     std=IMAGE_STD)
                compiled["sensor/128"] = mcu_npu.compile(
                    model, raw[0], target=target, calibration=raw, inputs=one_mean,
                    outputs="int8", progress=False)
            for io, prog in compiled.items():
                r = row(prog)
                print(f"{name:<18}{target:<14}{io:<12}{r['latency']:>12,.1f}{r['npu']:>10,.1f}"
                      f"{r['boundary']:>13,.1f}{r['share']:>7.1f}%", flush=True)


if __name__ == "__main__":
    main()
