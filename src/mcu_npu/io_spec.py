"""Declared program I/O: the inputs as the sensor gives them and the outputs as the firmware
wants them (``compile(..., inputs=..., outputs=...)``).

``InputSpec`` says what one program input carries: its element type (a camera's ``uint8``
pixels, a front-end's ``int8`` / ``int16`` features, or ``float``), its layout (PyTorch's
``channels_first`` or the sensor's ``channels_last``, e.g. HWC pixels) and the per-channel
normalisation ``(x - mean) / std`` the model expects. ``ProgramIO`` is the one value the
``inputs`` stage makes from the arguments (``declare``) and the later stages read: the front
module (``flow.front``), the input observers (``quantization.pinned_inputs``), the program's
integer inputs (``flow.int8_io``) and the report. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError

DTYPES = ("uint8", "int8", "int16", "float")
LAYOUTS = ("channels_first", "channels_last")
OUTPUTS = ("float", "int8")

RANGES = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-32768, 32767)}
"""The values an integer input can hold: its quantization is pinned to them (uint8 and int8:
one step per value, so the program reads the sensor's numbers exactly)."""


@dataclass(frozen=True, kw_only=True)
class InputSpec:
    """One program input as the sensor gives it. ``mean`` and ``std``: one value per channel
    (or one for all), applied as ``(x - mean) / std`` before the model; None: none."""

    dtype: str = "float"
    layout: str = "channels_first"
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    @property
    def is_integer(self) -> bool:
        return self.dtype in RANGES

    @property
    def is_raw(self) -> bool:
        """Whether the model sees something other than the input itself."""
        return (self.dtype != "float" or self.layout != "channels_first"
                or self.mean is not None or self.std is not None)

    @property
    def folds(self) -> bool:
        """Whether the normalisation folds exactly into the input's quantization: a uint8 /
        int8 input (one step per value) with one mean for all channels, an integer, and one
        std. The quantized input then reads ``real = (x - mean) / std`` with scale ``1 /
        std`` and zero point ``mean`` (- 128 for uint8's int8), and no op normalises."""
        if self.dtype not in ("uint8", "int8") or (self.mean is None and self.std is None):
            return False
        mean = self.mean or (0.0,)
        std = self.std or (1.0,)
        return len(set(mean)) == 1 and len(set(std)) == 1 and float(mean[0]).is_integer() \
            and RANGES[self.dtype][0] <= mean[0] <= RANGES[self.dtype][1]

    @property
    def mean_folds(self) -> bool:
        """Whether the mean alone folds into the input's quantization: a uint8 / int8 input
        with one integer mean (or none) for all channels but a std per channel. The input's
        quantization then reads ``x - mean`` (zero point ``mean``), and the per-channel
        ``1 / std`` is a scaling, which a following convolution absorbs exactly whatever its
        zero padding (``passes.aten.FoldInputNormalisation``)."""
        if self.dtype not in ("uint8", "int8") or self.folds or self.std is None \
                or len(set(self.std)) == 1:
            return False
        mean = self.mean or (0.0,)
        return len(set(mean)) == 1 and float(mean[0]).is_integer() \
            and RANGES[self.dtype][0] <= mean[0] <= RANGES[self.dtype][1]

    def quantization_affine(self) -> tuple[float, float] | None:
        """(mean, std) the input's quantization applies (``folds``: both; ``mean_folds``:
        the mean, std 1), or None when it applies none."""
        if self.folds:
            return (self.mean or (0.0,))[0], (self.std or (1.0,))[0]
        if self.mean_folds:
            return (self.mean or (0.0,))[0], 1.0
        return None

    def normalised_range(self) -> tuple[float, float]:
        """The range the model's front sees: the dtype's, with the ``quantization_affine``
        applied."""
        lo, hi = RANGES[self.dtype]
        affine = self.quantization_affine()
        if affine is None:
            return float(lo), float(hi)
        mean, std = affine
        ends = sorted(((lo - mean) / std, (hi - mean) / std))
        return ends[0], ends[1]

    def as_dict(self) -> dict:
        return {"dtype": self.dtype, "layout": self.layout,
                "mean": list(self.mean) if self.mean is not None else None,
                "std": list(self.std) if self.std is not None else None}


@dataclass(frozen=True)
class ProgramIO:
    """The program's declared I/O: one ``InputSpec`` (or None: as the model takes it) per
    input, and whether outputs are the NPU's int8 or dequantized floats."""

    inputs: tuple[InputSpec | None, ...] = ()
    outputs: str = "float"
    mode: str = "float"
    """``compile``'s ``io``: "int8" makes every input not declared otherwise int8 too."""
    state: object = None
    """The model's state (``program_state.ProgramState``) when it keeps any between calls:
    its tensors are inputs and outputs after the model's own until the lowered program
    makes them buffers again."""

    @property
    def declared(self) -> bool:
        return any(s is not None and s.is_raw for s in self.inputs)

    def spec(self, index: int) -> InputSpec | None:
        return self.inputs[index] if index < len(self.inputs) else None

    @property
    def changes_program(self) -> bool:
        """Whether the program's I/O differs from float in, float out."""
        return self.declared or self.mode == "int8" or self.outputs == "int8"

    def input_record(self, index: int) -> dict | None:
        """The report's ``io`` entry of a declared integer input (``real = q``), else None."""
        spec = self.spec(index)
        if spec is None or not spec.is_integer:
            return None
        lo, hi = RANGES[spec.dtype]
        return {"dtype": spec.dtype, "scale": 1.0, "zero_point": 0, "quant_min": lo,
                "quant_max": hi, "declared": spec.as_dict()}


def declare(inputs, outputs, io: str, shapes: list[tuple[int, ...]]) -> ProgramIO:
    """``ProgramIO`` from ``compile``'s ``inputs``/``outputs`` for a model whose example
    inputs have ``shapes``; ConfigError naming the problem and the fix. ``outputs`` None
    follows ``io``."""
    outputs = io if outputs is None else outputs
    if outputs not in OUTPUTS:
        raise ConfigError(f"unknown outputs {outputs!r}; choose one of: {', '.join(OUTPUTS)}")
    if inputs is None:
        return ProgramIO((), outputs, io)
    if isinstance(inputs, (InputSpec, str)) or (isinstance(inputs, dict) and all(
            isinstance(k, str) for k in inputs)):
        inputs = {0: inputs}
    elif isinstance(inputs, (list, tuple)):
        inputs = dict(enumerate(inputs))
    elif not isinstance(inputs, dict):
        raise ConfigError(f"inputs= takes an InputSpec, a list of them (one per model input) "
                          f"or a dict {{input index: InputSpec}}, not {type(inputs).__name__}")
    specs: list[InputSpec | None] = [None] * len(shapes)
    for index, spec in inputs.items():
        if not isinstance(index, int) or not 0 <= index < len(shapes):
            raise ConfigError(f"inputs= declares input {index!r}, but the model takes "
                              f"{len(shapes)} input(s) (indices 0..{len(shapes) - 1}); "
                              "declare only those")
        specs[index] = None if spec is None else _spec(spec, index, shapes[index])
    return ProgramIO(tuple(specs), outputs, io)


def _spec(spec, index: int, shape) -> InputSpec:
    """One declaration checked against its input's ``shape`` (as the sensor gives it)."""
    what = f"inputs[{index}]"
    if isinstance(spec, str):
        spec = {"dtype": spec}
    if isinstance(spec, dict):
        unknown = set(spec) - {"dtype", "layout", "mean", "std"}
        if unknown:
            raise ConfigError(f"{what} has unknown key(s) {', '.join(sorted(unknown))}; an "
                              "input declaration takes dtype, layout, mean and std")
        spec = InputSpec(**spec)
    if not isinstance(spec, InputSpec):
        raise ConfigError(f"{what} is a {type(spec).__name__}; declare it as "
                          "mcu_npu.InputSpec(dtype=..., layout=..., mean=..., std=...)")
    if spec.dtype not in DTYPES:
        raise ConfigError(f"{what}: unknown dtype {spec.dtype!r}; choose one of: "
                          f"{', '.join(DTYPES)}")
    if spec.layout not in LAYOUTS:
        raise ConfigError(f"{what}: unknown layout {spec.layout!r}; choose one of: "
                          f"{', '.join(LAYOUTS)}")
    rank = len(shape)
    if spec.layout == "channels_last" and rank < 3:
        raise ConfigError(f"{what}: a channels_last input has a batch, at least one spatial "
                          f"and a channel axis, the example input has shape {tuple(shape)}; "
                          "declare it channels_first")
    channels = int(shape[-1] if spec.layout == "channels_last" else
                   shape[1] if rank >= 2 else shape[0])
    mean = _per_channel(spec.mean, "mean", what, channels, spec.layout)
    std = _per_channel(spec.std, "std", what, channels, spec.layout)
    if std is not None and any(s == 0 for s in std):
        raise ConfigError(f"{what}: std holds a zero; every std must be non-zero")
    return InputSpec(dtype=spec.dtype, layout=spec.layout, mean=mean, std=std)


def _per_channel(values, name: str, what: str, channels: int, layout: str):
    if values is None:
        return None
    try:
        values = tuple(float(v) for v in (values if hasattr(values, "__iter__") else [values]))
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: {name} must be numbers, one per channel") from None
    if len(values) not in (1, channels):
        axis = "last" if layout == "channels_last" else "second"
        raise ConfigError(f"{what}: {name} has {len(values)} values but the input has "
                          f"{channels} channels (its {axis} axis, {layout}); give one value "
                          "per channel, or one for all")
    return values * channels if len(values) == 1 else values
