"""Front: the model wrapped so it takes its inputs as declared (``io_spec.ProgramIO``).

The wrapper takes each declared input as the sensor's numbers in float (pixel values 0 ..
255 for uint8, the features for int8 / int16) in the declared layout, moves a channels-last
input to the model's channels-first order, and normalises ``(x - mean) / std`` per channel
as a depthwise 1x1 convolution (weight ``1 / std``, bias ``-mean / std``; a 1-D one for
``(N, C, T)`` features, a multiply-add below rank 3). Where one integer mean and one std
hold for every channel of a uint8 / int8 input (``InputSpec.folds``), no op normalises:
the front takes the normalised values, whose quantization (scale ``1 / std``, zero point
``mean``) reads the raw numbers exactly. Where one integer mean holds but the std differs
per channel (``InputSpec.mean_folds``), the quantization takes the mean and the 1x1 layer
only scales, which ``FoldInputNormalisation`` folds into the first convolution; so does a
full normalisation before an unpadded convolution (``fold_normalisation``). Quantized, the permute becomes a layout
the NPU graph reads directly (no transpose) and the normalisation the NPU's first layer; the
input's quantization is pinned to the sensor's range (``quantization.pinned_inputs``), so the
program reads the raw numbers exactly and the firmware passes them as they are. Inputs not
declared pass through unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

from ..io_spec import InputSpec, ProgramIO


class Front(nn.Module):
    """``model`` taking its inputs as ``io`` declares them."""

    def __init__(self, model: nn.Module, io: ProgramIO, ranks: list[int]):
        super().__init__()
        self.model = model
        self.specs = [io.spec(i) for i in range(len(ranks))]
        self.ranks = ranks
        for i, spec in enumerate(self.specs):
            if spec is not None and (spec.mean is not None or spec.std is not None) \
                    and not spec.folds:  # else the input's quantization normalises
                weight, bias = affine(spec if not spec.mean_folds else
                                      InputSpec(dtype=spec.dtype, std=spec.std))
                self.register_buffer(f"norm_weight_{i}", weight)
                self.register_buffer(f"norm_bias_{i}", bias)

    def forward(self, *xs):
        return self.model(*(self._front(i, x) for i, x in enumerate(xs)))

    def _front(self, i: int, x: torch.Tensor) -> torch.Tensor:
        spec = self.specs[i]
        if spec is None:
            return x
        rank = x.dim()
        if spec.layout == "channels_last":
            x = x.permute(0, rank - 1, *range(1, rank - 1))
        if not hasattr(self, f"norm_weight_{i}"):
            return x
        weight, bias = getattr(self, f"norm_weight_{i}"), getattr(self, f"norm_bias_{i}")
        channels = weight.shape[0]
        if rank == 4:
            return nn.functional.conv2d(x, weight.reshape(channels, 1, 1, 1), bias,
                                        groups=channels)
        if rank == 3:
            return nn.functional.conv1d(x, weight.reshape(channels, 1, 1), bias,
                                        groups=channels)
        shape = (channels, *([1] * (rank - 2))) if rank >= 2 else (channels,)
        return x * weight.reshape(shape) + bias.reshape(shape)


def affine(spec: InputSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) per channel with ``weight * x + bias == (x - mean) / std``."""
    n = len(spec.mean if spec.mean is not None else spec.std)
    mean = torch.tensor(spec.mean if spec.mean is not None else [0.0] * n, dtype=torch.float64)
    std = torch.tensor(spec.std if spec.std is not None else [1.0] * n, dtype=torch.float64)
    return (1 / std).float(), (-mean / std).float()


def front(model: nn.Module, io: ProgramIO, example_inputs: tuple) -> nn.Module:
    """``model`` wrapped in a ``Front`` when ``io`` declares an input, else ``model``."""
    if not io.declared:
        return model
    return Front(model, io, [x.dim() for x in example_inputs]).eval()


def as_float(io: ProgramIO, sample: tuple) -> tuple:
    """A sample as the front takes it: declared inputs' numbers in float32, with the
    ``InputSpec.quantization_affine`` applied (in float64)."""
    out = []
    for i, x in enumerate(sample):
        spec = io.spec(i)
        if spec is not None and spec.is_raw and not x.dtype.is_floating_point:
            folded = spec.quantization_affine()
            if folded is not None:
                mean, std = folded
                x = (x.double() - mean) / std
            x = x.to(torch.float32)
        out.append(x)
    return tuple(out)


def declared_io(inputs, outputs, io: str, example_inputs: tuple, samples: list[tuple],
                accuracy_samples: list[tuple] | None):
    """(``ProgramIO``, example inputs, calibration samples, accuracy samples) for the stages:
    the declaration checked against the example inputs (given as the sensor gives them: an
    integer input's tensors have its dtype, or are float), and the declared inputs' samples
    as the front takes them (``as_float``)."""
    import torch

    from ..errors import ConfigError
    from ..io_spec import declare

    program_io = declare(inputs, outputs, io, [tuple(x.shape) for x in example_inputs])
    for i, x in enumerate(example_inputs):
        spec = program_io.spec(i)
        if spec is None or not spec.is_integer or x.dtype.is_floating_point:
            continue
        if x.dtype != getattr(torch, spec.dtype):
            raise ConfigError(f"inputs[{i}] is declared {spec.dtype} but the example input is "
                              f"{str(x.dtype).removeprefix('torch.')}; give the example and "
                              f"calibration inputs as the sensor gives them ({spec.dtype})")
    if not program_io.declared:
        return program_io, example_inputs, samples, accuracy_samples
    convert = lambda s: as_float(program_io, s)  # noqa: E731
    return (program_io, convert(example_inputs), [convert(s) for s in samples],
            None if accuracy_samples is None else [convert(s) for s in accuracy_samples])


def pinned_ranges(program_io: ProgramIO) -> dict[int, tuple[float, float]]:
    """User input index -> the range its observers are pinned to: the uint8 and int8
    declared inputs' whole range (one quantization step per value); int16 ones keep their
    calibrated range (8 bits cannot hold 16 exactly)."""
    return {i: s.normalised_range() for i, s in enumerate(program_io.inputs)
            if s is not None and s.dtype in ("uint8", "int8")}


def fold_normalisation(graph, io: ProgramIO):
    """The exported front ``graph`` with each declared input's 1x1 normalising layer folded
    into the convolution reading it, where that is exact (``FoldInputNormalisation``)."""
    if not io.declared:
        return graph
    from ..passes.aten import FoldInputNormalisation

    return FoldInputNormalisation()(graph).graph_module
