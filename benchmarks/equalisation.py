"""Benchmark: does cross-layer equalisation pay for this project's int8 programs?

Run::

    PYTHONPATH=src python benchmarks/equalisation.py
    PYTHONPATH=src python benchmarks/equalisation.py --models digits_cnn ds_cnn --target imxrt700

Cross-layer equalisation rescales each pair of layers joined through ReLUs and pools
(``A -> ReLU -> [pool] -> B``): A's output channel i is divided by ``s_i`` and B's input
channel i multiplied by it, which leaves the float model's outputs unchanged (ReLU and
pooling commute with a positive per-channel scale). Two choices of ``s`` are measured:

* ``weights``: data-free equalisation (Nagel et al., 2019): ``s_i = sqrt(r1_i r2_i) / r2_i``
  with ``r1_i`` the range of A's output channel i and ``r2_i`` of B's input channel i,
  iterated over the chain 20 times, so both layers' channel ranges meet;
* ``activations``: the ranges of B's input channels seen on the calibration samples are
  evened out against B's weights, ``s_i ~ x_i^a / r2_i^(1 - a)`` with ``a`` = 0.5.

Models: the trained ones of ``mcu_npu.models.trained`` that are a chain of layers (the
digits CNN, the GunPoint 1-D CNN) and the chains of MLPerf Tiny (DS-CNN, MobileNetV1-0.25,
the FC autoencoder; random weights). BatchNorm is folded into the layer before it first,
the same for every column, so the columns differ by the equalisation alone. Each variant is
compiled with ``mcu_npu.compile`` on the same calibration (32 inputs for the trained models,
16 standard-normal samples for MLPerf Tiny) and run on the host; columns are the output
SQNR against the float model over every held-out input (the trained models' held-out sets,
16 more standard-normal samples for MLPerf Tiny), and held-out accuracy where there is one.

Weights are quantized per output channel (the NPUs' scheme), so scaling A's output channels
does not change A's weight error; what equalisation moves is B's per-channel ranges and the
per-tensor activation range between the two. This script prints only and asserts nothing.
"""

from __future__ import annotations

import argparse
import copy
import sys
import warnings

import torch
from torch import nn

TRAINED = ("digits_cnn", "gunpoint_cnn")
MLPERF = ("ds_cnn", "mobilenet_v1_025", "fc_autoencoder")
LAYERS = (nn.Conv1d, nn.Conv2d, nn.Linear)
BETWEEN = (nn.ReLU, nn.MaxPool1d, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool1d,
           nn.AdaptiveAvgPool2d, nn.Flatten, nn.Dropout)
"""Modules a pair may have between its layers: each commutes with a positive per-channel
scale (Flatten only after a pool to one position, as in every model here)."""


def chain(model: nn.Module) -> nn.Sequential:
    """The model's children (Sequentials opened) as one Sequential, BatchNorm folded into
    the layer before it."""
    modules = []
    for child in copy.deepcopy(model).children():
        modules += list(child) if isinstance(child, nn.Sequential) else [child]
    out = []
    for m in modules:
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)) and out and isinstance(out[-1], LAYERS):
            layer = out[-1]
            scale = m.weight / torch.sqrt(m.running_var + m.eps)
            bias = layer.bias if layer.bias is not None else torch.zeros_like(scale)
            layer.weight = nn.Parameter(_per_out(layer.weight, scale).detach())
            layer.bias = nn.Parameter(((bias - m.running_mean) * scale + m.bias).detach())
            continue
        out.append(m)
    return nn.Sequential(*out).eval()


def _per_out(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return w * s.reshape(-1, *([1] * (w.dim() - 1)))


def _depthwise(layer) -> bool:
    return isinstance(layer, (nn.Conv1d, nn.Conv2d)) and layer.groups > 1


def _in_range(layer) -> torch.Tensor:
    """Per input channel of ``layer``, its largest weight magnitude."""
    w = layer.weight.abs()
    if _depthwise(layer):  # input channel i is output channel i
        return w.reshape(w.shape[0], -1).amax(1)
    return w.transpose(0, 1).reshape(w.shape[1], -1).amax(1)


def _rescale(a, b, s: torch.Tensor) -> None:
    """A's output channel i divided by s_i, B's input channel i multiplied by it."""
    a.weight = nn.Parameter(_per_out(a.weight, 1 / s).detach())
    a.bias = nn.Parameter((a.bias / s).detach())
    w = b.weight
    if _depthwise(b):
        b.weight = nn.Parameter(_per_out(w, s).detach())
    else:
        b.weight = nn.Parameter((w * s.reshape(1, -1, *([1] * (w.dim() - 2)))).detach())


def pairs(seq: nn.Sequential) -> list[tuple[int, int]]:
    """(index of A, index of B) of the pairs equalisation may rescale."""
    idx = [i for i, m in enumerate(seq) if isinstance(m, LAYERS)]
    return [(a, b) for a, b in zip(idx, idx[1:])
            if all(isinstance(m, BETWEEN) for m in seq[a + 1:b])
            and any(isinstance(m, nn.ReLU) for m in seq[a + 1:b])]


def by_weights(seq: nn.Sequential, _samples, iterations: int = 20) -> nn.Sequential:
    seq = copy.deepcopy(seq)
    with torch.no_grad():
        for _ in range(iterations):
            for a, b in pairs(seq):
                r1 = seq[a].weight.abs().reshape(seq[a].weight.shape[0], -1).amax(1)
                r2 = _in_range(seq[b])
                ok = (r1 > 0) & (r2 > 0)
                s = torch.where(ok, torch.sqrt(r1 * r2) / r2.clamp_min(1e-12), 1.0)
                _rescale(seq[a], seq[b], s)
    return seq


def by_activations(seq: nn.Sequential, samples, alpha: float = 0.5) -> nn.Sequential:
    seq = copy.deepcopy(seq)
    with torch.no_grad():
        for a, b in pairs(seq):
            x = torch.cat([seq[:b](s[0]) for s in samples])
            xr = x.transpose(0, 1).reshape(x.shape[1], -1).abs().amax(1)
            r2 = _in_range(seq[b])
            ok = (xr > 0) & (r2 > 0)
            s = torch.where(ok, xr.clamp_min(1e-12) ** alpha / r2.clamp_min(1e-12) ** (1 - alpha),
                            1.0)
            _rescale(seq[a], seq[b], s / s.max())  # B's input channel i becomes x_i / s_i
    return seq


VARIANTS = {"folded": lambda seq, _: seq, "weights": by_weights, "activations": by_activations}


def model_set(name: str):
    """(float model, example inputs, calibration samples, held-out runner -> (accuracy or
    None, outputs))."""
    if name in TRAINED:
        from mcu_npu.models.trained import evaluate, task

        t = task(name)
        return t.model, t.example(), t.calibration(32), lambda run: evaluate(t, run)
    from mcu_npu.models import mlperf_tiny

    model, example = getattr(mlperf_tiny, name)()
    g = torch.Generator().manual_seed(5)
    calibration = [(torch.randn(example[0].shape, generator=g),) for _ in range(16)]
    held_out = [torch.randn(example[0].shape, generator=g) for _ in range(16)]
    return model, example, calibration, lambda run: (None, torch.cat([run(x) for x in held_out]))


def main(argv=None) -> int:
    import mcu_npu
    from mcu_npu.estimate.metrics import sqnr_db

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=[*TRAINED, *MLPERF],
                        choices=[*TRAINED, *MLPERF])
    parser.add_argument("--target", default="corstone-300")
    args = parser.parse_args(argv)

    print(f"Output SQNR against float, dB (/ held-out accuracy, %), {args.target}, the "
          f"compile's default calibration\n")
    print(f"| model | pairs | {' | '.join(VARIANTS)} |")
    print("|---|---|" + "---|" * len(VARIANTS))
    for name in args.models:
        model, example, calibration, held_out = model_set(name)
        with torch.no_grad():
            _, floats = held_out(model)
        folded = chain(model)
        cells = []
        for variant in VARIANTS.values():
            seq = variant(folded, calibration)
            with torch.no_grad():
                exact = sqnr_db(floats, held_out(seq)[1])
            assert exact > 100, f"{name}: the rewrite changed the float outputs ({exact} dB)"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prog = mcu_npu.compile(seq, example, target=args.target, calibration=calibration)
            accuracy, outputs = held_out(lambda x: prog.run(x)[0])
            cells.append(f"{sqnr_db(floats, outputs):.2f}" +
                         ("" if accuracy is None else f" / {accuracy:.2f}"))
        print(f"| {name} | {len(pairs(folded))} | {' | '.join(cells)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
