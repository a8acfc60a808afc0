"""Random small networks for fuzzing the compile flow, and the checks each must pass.

A network is described by a *spec*, a plain value (a dict of ints, strings and tuples; its
``repr`` is valid Python), and ``build(spec)`` turns it into a ``torch.nn.Module`` and example
inputs. The spec fixes everything: the input (kind, batch, sizes), the blocks in order (each a
name and a dict of raw choices), the weight seed and the calibration sample count, so a spec
printed by a failing run rebuilds the very same network.

Tensors flow between blocks in one of four *kinds*: ``image`` [B, C, H, W], ``seq`` [B, C, L]
(the Conv1d layout), ``tokens`` [B, T, F] (Linear / recurrent / attention layout) and ``flat``
[B, F]. An ``image`` or ``seq`` may also be unbatched ([C, H, W], [C, L]) until a
``batch`` block adds the batch dim; only blocks that accept such tensors apply to them.

The builder does the shape bookkeeping: a block's raw choices are clamped to what the current
shape allows (kernel no larger than the padded input, groups a common divisor of the channel
counts, heads a divisor of the width, ...), so every spec is a valid module, including the
specs Hypothesis makes while shrinking. The next shape is read by running the block once.

``specs()`` is the Hypothesis strategy; ``check(spec, target)`` compiles a spec for one target
and asserts the fuzzing contract (see its docstring)."""

from __future__ import annotations

import math
import warnings

import torch
from hypothesis import strategies as st
from torch import nn

TARGETS = ("imxrt700", "corstone-300", "corstone-320")

# --- activations ---------------------------------------------------------------------------
ACTIVATIONS = ("relu", "relu6", "hardswish", "hardsigmoid", "sigmoid", "tanh", "silu", "gelu",
               "leaky_relu")


def activation(name: str) -> nn.Module:
    return {"relu": nn.ReLU(), "relu6": nn.ReLU6(), "hardswish": nn.Hardswish(),
            "hardsigmoid": nn.Hardsigmoid(), "sigmoid": nn.Sigmoid(), "tanh": nn.Tanh(),
            "silu": nn.SiLU(), "gelu": nn.GELU(), "leaky_relu": nn.LeakyReLU(0.1)}[name]


# --- block modules ---------------------------------------------------------------------------
class Lambda(nn.Module):
    """A parameter-free step given by a function (reshapes, means, selections)."""

    def __init__(self, fn, label: str):
        super().__init__()
        self.fn, self.label = fn, label

    def forward(self, x):
        return self.fn(x)

    def extra_repr(self) -> str:
        return self.label


class Residual(nn.Module):
    """``x (op) body(x)`` with op add or mul (same shape), or cat along ``dim``."""

    def __init__(self, body: nn.Module, op: str, dim: int = 1):
        super().__init__()
        self.body, self.op, self.dim = body, op, dim

    def forward(self, x):
        y = self.body(x)
        if self.op == "add":
            return x + y
        if self.op == "mul":
            return x * y
        return torch.cat([x, y], dim=self.dim)


class ChannelsLastLinear(nn.Module):
    """Permute an image to channels-last, a Linear over the channels, permute back."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.fc = nn.Linear(cin, cout)

    def forward(self, x):
        return self.fc(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Recurrent(nn.Module):
    """A batch-first GRU / LSTM / RNN; the output sequence only."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x)[0]


class RingState(nn.Module):
    """A ring of the last ``k`` frames kept between calls (a buffer written in place): the
    window is the ring and the new frames concatenated over time; the ring keeps its tail."""

    def __init__(self, shape, k: int):
        super().__init__()
        self.k = k
        self.register_buffer("ring", torch.zeros(*shape[:-1], k))

    def forward(self, x):
        window = torch.cat([self.ring, x], dim=-1)
        self.ring.copy_(window[..., -self.k:])
        return window

    def reset(self):
        self.ring.zero_()


class RecurrentState(nn.Module):
    """A batch-first GRU / LSTM whose final state is kept between calls in buffers and
    starts the next call."""

    def __init__(self, layer: nn.Module, batch: int):
        super().__init__()
        self.layer = layer
        size = (layer.num_layers, batch, layer.hidden_size)
        self.register_buffer("h", torch.zeros(size))
        if isinstance(layer, nn.LSTM):
            self.register_buffer("c", torch.zeros(size))

    def forward(self, x):
        if isinstance(self.layer, nn.LSTM):
            y, (h, c) = self.layer(x, (self.h, self.c))
            self.c.copy_(c)
        else:
            y, h = self.layer(x, self.h)
        self.h.copy_(h)
        return y

    def reset(self):
        for b in self.buffers():
            b.zero_()


STATEFUL = (RingState, RecurrentState)
"""Blocks that keep state between calls: a network holding one is checked as a stream."""


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class SqueezeExcite(nn.Module):
    """x * gate(conv(act(conv(mean over space)))): a broadcast multiply."""

    def __init__(self, c: int, r: int, act: str, gate: str, dims):
        super().__init__()
        conv = nn.Conv2d if len(dims) == 2 else nn.Conv1d
        self.f1, self.f2 = conv(c, r, 1), conv(r, c, 1)
        self.act, self.gate, self.dims = activation(act), activation(gate), dims

    def forward(self, x):
        w = x.mean(self.dims, keepdim=True)
        return x * self.gate(self.f2(self.act(self.f1(w))))


# shapes public model libraries use (timm): each was a compile failure or a CPU op once
class ClassToken(nn.Module):
    """A learned token expanded to the batch and put before the tokens (ViT, DeiT)."""

    def __init__(self, width: int):
        super().__init__()
        self.token = nn.Parameter(torch.randn(1, 1, width) * 0.5)

    def forward(self, x):
        return torch.cat([self.token.expand(x.shape[0], -1, -1), x], dim=1)


class BiasTable(nn.Module):
    """A learned table read through a constant index buffer and added (LeViT's attention
    biases)."""

    def __init__(self, tokens: int, width: int):
        super().__init__()
        self.table = nn.Parameter(torch.randn(width, 2 * tokens - 1) * 0.5)
        pos = torch.arange(tokens)
        self.register_buffer("idx", (pos[:, None] - pos[None, :]).abs(), persistent=False)

    def forward(self, x):  # x: [B, T, F]
        return x + self.table[:, self.idx].sum(-1).transpose(0, 1)


class Masked(nn.Module):
    """A boolean mask built from constants, inverted, then masked_fill (EdgeNeXt)."""

    def __init__(self, tokens: int, keep: int):
        super().__init__()
        self.register_buffer("mask", torch.arange(tokens) < keep, persistent=False)

    def forward(self, x):  # x: [B, T, F]
        return x.masked_fill(~self.mask[None, :, None], 0.0)


class ChunkOne(nn.Module):
    """A split whose second piece is never read (MobileViTv2, SHViT)."""

    def __init__(self, dim: int, body: nn.Module):
        super().__init__()
        self.dim, self.body = dim, body

    def forward(self, x):
        a, _ = torch.split(x, [x.shape[self.dim] - x.shape[self.dim] // 2,
                               x.shape[self.dim] // 2], dim=self.dim)
        return self.body(a)


class InPlaceAdd(nn.Module):
    """``out = body(x); out += x`` (MobileOne)."""

    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body

    def forward(self, x):
        out = self.body(x)
        out += x
        return out


class AutocastOff(nn.Module):
    """A region run with autocast disabled (EfficientViT)."""

    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body

    def forward(self, x):
        with torch.autocast(device_type="cpu", enabled=False):
            return self.body(x.float())


class FuzzNet(nn.Module):
    """The blocks of a spec in sequence."""

    def __init__(self, steps):
        super().__init__()
        self.steps = nn.ModuleList(steps)

    def forward(self, x):
        for step in self.steps:
            x = step(x)
        return x


# --- shape helpers -----------------------------------------------------------------------------
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _pick(options, raw: int):
    return options[raw % len(options)]


def _spatial(shape, kind):
    return list(shape[-2:]) if kind == "image" else [shape[-1]]


def _channels(shape, kind):
    return shape[-3] if kind == "image" else shape[-2]


def _kernel(size: int, k: int, pad: int) -> int:
    """``k`` clamped so one window fits the input padded by ``pad`` (or by at most half the
    clamped kernel)."""
    k = max(1, min(k, size + 2 * pad))
    return max(1, min(k, size + 2 * min(pad, k // 2)))


def _conv(kind, shape, p, depthwise=False):
    """A conv of the raw choices ``p`` that fits ``shape``: kernel per dim no larger than the
    padded input, padding at most half the smallest kernel, groups a common divisor of the
    channel counts (depthwise: groups = channels, channel multiplier 1 or 2)."""
    cin, sizes = _channels(shape, kind), _spatial(shape, kind)
    if depthwise:
        cout, groups = cin * (1 + p.get("mult", 0) % 2), cin
    else:
        cout = p["out"]
        common = [g for g in _divisors(cin) if cout % g == 0]
        groups = _pick(common, p.get("groups", 0))
    ks = [_kernel(s, p["k"], p["pad"]) for s in sizes]
    pad = min(p["pad"], min(ks) // 2)
    ks = [min(k, s + 2 * pad) for k, s in zip(ks, sizes)]
    conv = nn.Conv2d if kind == "image" else nn.Conv1d
    return conv(cin, cout, tuple(ks), stride=p["stride"], padding=pad, groups=groups,
                bias=p.get("bias", True))


def _pool(kind, shape, p, mode):
    """A max / avg pool of the raw choices ``p`` that fits ``shape`` (PyTorch pads a pool by
    at most half its kernel)."""
    sizes = _spatial(shape, kind)
    k = min(max(1, p["k"]), min(sizes) + 2 * (p["k"] // 2))
    pad = min(p["pad"], k // 2)
    k = min(k, min(sizes) + 2 * pad)
    pad = min(pad, k // 2)
    stride = max(1, p["stride"])
    two = kind == "image"
    if mode == "max":
        return (nn.MaxPool2d if two else nn.MaxPool1d)(k, stride, pad,
                                                        ceil_mode=p.get("ceil", False))
    return (nn.AvgPool2d if two else nn.AvgPool1d)(k, stride, pad, ceil_mode=p.get("ceil", False),
                                                   count_include_pad=p.get("count_pad", True))


def _batchnorm(n: int, two: bool) -> nn.Module:
    bn = (nn.BatchNorm2d if two else nn.BatchNorm1d)(n)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.3, 0.3)
    return bn


# --- the blocks ------------------------------------------------------------------------------
# A block's builder takes (kind, batched shape, raw choices) and returns (module, next kind);
# the table BLOCKS below names the kinds each applies to and the strategy of its choices.
I = st.integers


def _same_body(kind, shape, p):
    """A shape-preserving body for residual / gating blocks."""
    if kind in ("image", "seq"):
        c = _channels(shape, kind)
        conv = (nn.Conv2d if kind == "image" else nn.Conv1d)(c, c, 3 if p["k3"] else 1,
                                                             padding=1 if p["k3"] else 0)
        return nn.Sequential(conv, activation(p["act"]))
    return nn.Sequential(nn.Linear(shape[-1], shape[-1]), activation(p["act"]))


def _b_conv(kind, shape, p):
    return _conv(kind, shape, p), kind


def _b_depthwise(kind, shape, p):
    return _conv(kind, shape, p, depthwise=True), kind


def _b_maxpool(kind, shape, p):
    return _pool(kind, shape, p, "max"), kind


def _b_avgpool(kind, shape, p):
    return _pool(kind, shape, p, "avg"), kind


def _b_adaptive(kind, shape, p):
    sizes = _spatial(shape, kind)
    out = tuple(1 + (p["out"] + i) % s for i, s in enumerate(sizes))
    two = kind == "image"
    if p["max"]:
        return (nn.AdaptiveMaxPool2d(out) if two else nn.AdaptiveMaxPool1d(out[0])), kind
    return (nn.AdaptiveAvgPool2d(out) if two else nn.AdaptiveAvgPool1d(out[0])), kind


def _b_batchnorm(kind, shape, p):
    if kind == "tokens":  # over the features: [B, T, F] -> [B, F, T] and back
        swap = Lambda(lambda x: x.transpose(1, 2), "transpose(1, 2)")
        return nn.Sequential(swap, _batchnorm(shape[-1], False), swap), kind
    return _batchnorm(shape[1], kind == "image"), kind


def _b_act(kind, shape, p):
    return activation(p["act"]), kind


def _b_add(kind, shape, p):
    return Residual(_same_body(kind, shape, p), "add"), kind


def _b_mul(kind, shape, p):
    return Residual(_same_body(kind, shape, p), "mul"), kind


def _b_se(kind, shape, p):
    c = _channels(shape, kind)
    dims = (2, 3) if kind == "image" else (2,)
    return SqueezeExcite(c, 1 + p["r"] % max(1, c), p["act"], p["gate"], dims), kind


def _b_cat(kind, shape, p):
    dim = {"image": -3, "seq": -2, "tokens": -1, "flat": -1}[kind]
    if kind in ("image", "seq"):
        conv = nn.Conv2d if kind == "image" else nn.Conv1d
        body = nn.Sequential(conv(_channels(shape, kind), p["out"], 1), activation(p["act"]))
    else:
        body = nn.Sequential(nn.Linear(shape[-1], p["out"]), activation(p["act"]))
    return Residual(body, "cat", dim), kind


def _b_scalar(kind, shape, p):
    c = (p["c"] - 4) / 4 or 0.5
    if p["mul"]:
        return Lambda(lambda x: x * c, f"x * {c}"), kind
    return Lambda(lambda x: x + c, f"x + {c}"), kind


def _b_linear(kind, shape, p):
    return nn.Linear(shape[-1], p["out"], bias=p["bias"]), kind


def _b_channels_linear(kind, shape, p):
    return ChannelsLastLinear(shape[1], p["out"]), kind


def _b_swap_hw(kind, shape, p):
    return Lambda(lambda x: x.transpose(-1, -2), "transpose(-1, -2)"), kind


def _b_recurrent(kind, shape, p):
    cls = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}[p["cell"]]
    extra = {"nonlinearity": "relu" if p["relu"] else "tanh"} if p["cell"] == "rnn" else {}
    layer = cls(shape[-1], p["hidden"], num_layers=p["layers"], batch_first=True,
                bidirectional=p["bidir"], **extra)
    return Recurrent(layer), kind


def _b_ring_state(kind, shape, p):
    return RingState(shape, p["k"]), kind


def _b_recurrent_state(kind, shape, p):
    cls = {"gru": nn.GRU, "lstm": nn.LSTM}[p["cell"]]
    return RecurrentState(cls(shape[-1], p["hidden"], num_layers=p["layers"],
                              batch_first=True), shape[0]), kind


def _b_attention(kind, shape, p):
    width = shape[-1]
    heads = _pick([d for d in _divisors(width) if d <= 4], p["heads"])
    return SelfAttention(width, heads), kind


def _b_attention_spelling(kind, shape, p):
    """Attention in one of the ways libraries write it (``attention_spellings``)."""
    from .attention_spellings import FACTORIES

    width, tokens = shape[-1], shape[1]
    heads = _pick([d for d in _divisors(width) if d <= 4], p["heads"])
    return FACTORIES[p["spelling"]](width, heads, tokens), kind


def _b_mean(kind, shape, p):
    if kind == "image":
        if p["keep"]:
            return Lambda(lambda x: x.mean((2, 3), keepdim=True), "mean((2, 3), keepdim)"), kind
        return Lambda(lambda x: x.mean((2, 3)), "mean((2, 3))"), "flat"
    if kind == "seq":
        return Lambda(lambda x: x.mean(-1), "mean(-1)"), "flat"
    if kind == "tokens":
        return Lambda(lambda x: x.mean(1), "mean(1)"), "flat"
    return Lambda(lambda x: x.mean(-1, keepdim=True), "mean(-1, keepdim)"), "flat"


def _b_flatten(kind, shape, p):
    return nn.Flatten(1), "flat"


def _b_last_step(kind, shape, p):
    return Lambda(lambda x: x[:, -1], "x[:, -1]"), "flat"


def _b_to_seq(kind, shape, p):
    if kind == "image":
        if p["how"] % 2:
            return Lambda(lambda x: x.flatten(2), "flatten(2)"), "seq"
        c, h, w = shape[1:]
        return Lambda(lambda x: x.reshape(x.shape[0], c * h, w), f"reshape(B, {c * h}, {w})"), \
            "seq"
    if kind == "tokens":
        return Lambda(lambda x: x.transpose(1, 2), "transpose(1, 2)"), "seq"
    f = shape[1]
    c = _pick(_divisors(f), p["how"])
    return Lambda(lambda x: x.reshape(x.shape[0], c, f // c), f"reshape(B, {c}, {f // c})"), \
        "seq"


def _b_to_tokens(kind, shape, p):
    if kind == "image":
        return Lambda(lambda x: x.flatten(2).transpose(1, 2), "flatten(2).transpose(1, 2)"), \
            "tokens"
    if kind == "seq":
        return Lambda(lambda x: x.transpose(1, 2), "transpose(1, 2)"), "tokens"
    f = shape[1]
    t = _pick(_divisors(f), p["how"])
    return Lambda(lambda x: x.reshape(x.shape[0], t, f // t), f"reshape(B, {t}, {f // t})"), \
        "tokens"


def _b_to_image(kind, shape, p):
    if kind == "seq":
        if p["how"] % 2:
            return Lambda(lambda x: x.unsqueeze(2), "unsqueeze(2)"), "image"
        c, length = shape[1:]
        h = _pick(_divisors(length), p["how"] // 2)
        return Lambda(lambda x: x.reshape(x.shape[0], c, h, length // h),
                      f"reshape(B, {c}, {h}, {length // h})"), "image"
    f = shape[1]
    c = _pick(_divisors(f), p["how"])
    h = _pick(_divisors(f // c), p["how"] // 3)
    w = f // c // h
    return Lambda(lambda x: x.reshape(x.shape[0], c, h, w), f"reshape(B, {c}, {h}, {w})"), \
        "image"


def _b_class_token(kind, shape, p):
    return ClassToken(shape[-1]), kind


def _b_bias_table(kind, shape, p):
    return BiasTable(shape[1], shape[2]), kind


def _b_mask(kind, shape, p):
    return Masked(shape[1], 1 + p["keep"] % shape[1]), kind


def _b_chunk(kind, shape, p):
    dim = {"image": 1, "seq": 1, "tokens": 2, "flat": 1}[kind]
    if shape[dim] < 2:
        return Lambda(lambda x: x, "identity"), kind
    return ChunkOne(dim, activation(p["act"])), kind


def _b_inplace_add(kind, shape, p):
    return InPlaceAdd(_same_body(kind, shape, p)), kind


def _b_autocast_off(kind, shape, p):
    return AutocastOff(_same_body(kind, shape, p)), kind


def _b_group_norm(kind, shape, p):
    c = shape[1]
    return nn.GroupNorm(_pick(_divisors(c), p["groups"]), c), kind


def _b_batch(kind, shape, p):
    return Lambda(lambda x: x.unsqueeze(0), "unsqueeze(0)"), kind


ATTENTION_SPELLINGS = ("multihead_attention_padding", "sdpa_bool_mask", "sdpa_float_mask",
                       "sdpa_causal", "sdpa_scale", "eager_bias", "padding_all_where",
                       "padding_eager_masked_fill", "eager_causal_masked_fill",
                       "extended_ones_mask", "relative_position_bias")
"""``attention_spellings.FACTORIES`` names beyond the plain ``attention`` block."""

_ACT = st.sampled_from(ACTIVATIONS)
_BODY = st.fixed_dictionaries({"k3": st.booleans(), "act": _ACT})
_CONV = st.fixed_dictionaries({"out": I(1, 12), "k": I(1, 5), "stride": I(1, 3), "pad": I(0, 2),
                               "groups": I(0, 3), "bias": st.booleans()})
_DW = st.fixed_dictionaries({"k": I(1, 5), "stride": I(1, 3), "pad": I(0, 2), "mult": I(0, 1),
                             "bias": st.booleans()})
_POOL = st.fixed_dictionaries({"k": I(1, 4), "stride": I(1, 3), "pad": I(0, 2),
                               "ceil": st.booleans(), "count_pad": st.booleans()})
_NONE = st.fixed_dictionaries({})
_HOW = st.fixed_dictionaries({"how": I(0, 11)})

SPATIAL = ("image", "seq")
BATCHED = ("image", "seq", "tokens", "flat")

# name: (kinds it applies to, whether unbatched tensors are accepted, params, builder)
BLOCKS = {
    "conv": (SPATIAL, True, _CONV, _b_conv),
    "depthwise": (SPATIAL, True, _DW, _b_depthwise),
    "maxpool": (SPATIAL, True, _POOL, _b_maxpool),
    "avgpool": (SPATIAL, True, _POOL, _b_avgpool),
    "adaptive_pool": (SPATIAL, True, st.fixed_dictionaries({"out": I(0, 5),
                                                            "max": st.booleans()}), _b_adaptive),
    "batchnorm": (BATCHED, False, _NONE, _b_batchnorm),
    "act": (BATCHED, True, st.fixed_dictionaries({"act": _ACT}), _b_act),
    "add": (BATCHED, True, _BODY, _b_add),
    "mul": (BATCHED, True, _BODY, _b_mul),
    "squeeze_excite": (SPATIAL, False, st.fixed_dictionaries(
        {"r": I(0, 7), "act": _ACT, "gate": st.sampled_from(("sigmoid", "hardsigmoid"))}),
        _b_se),
    "cat": (BATCHED, True, st.fixed_dictionaries({"out": I(1, 8), "act": _ACT}), _b_cat),
    "scalar": (BATCHED, True, st.fixed_dictionaries({"c": I(0, 8), "mul": st.booleans()}),
               _b_scalar),
    "linear": (("tokens", "flat"), False,
               st.fixed_dictionaries({"out": I(1, 24), "bias": st.booleans()}), _b_linear),
    "channels_linear": (("image",), False, st.fixed_dictionaries({"out": I(1, 12)}),
                        _b_channels_linear),
    "swap_hw": (("image",), True, _NONE, _b_swap_hw),
    "recurrent": (("tokens",), False, st.fixed_dictionaries(
        {"cell": st.sampled_from(("gru", "lstm", "rnn")), "hidden": I(1, 12),
         "layers": I(1, 2), "bidir": st.booleans(), "relu": st.booleans()}), _b_recurrent),
    "attention": (("tokens",), False, st.fixed_dictionaries({"heads": I(0, 3)}), _b_attention),
    "attention_spelling": (("tokens",), False, st.fixed_dictionaries(
        {"spelling": st.sampled_from(ATTENTION_SPELLINGS), "heads": I(0, 3)}),
        _b_attention_spelling),
    "mean": (BATCHED, False, st.fixed_dictionaries({"keep": st.booleans()}), _b_mean),
    "flatten": (("image", "seq", "tokens"), False, _NONE, _b_flatten),
    "last_step": (("tokens",), False, _NONE, _b_last_step),
    "to_seq": (("image", "tokens", "flat"), False, _HOW, _b_to_seq),
    "to_tokens": (("image", "seq", "flat"), False, _HOW, _b_to_tokens),
    "to_image": (("seq", "flat"), False, _HOW, _b_to_image),
    "batch": (SPATIAL, "only", _NONE, _b_batch),
    "class_token": (("tokens",), False, _NONE, _b_class_token),
    "bias_table": (("tokens",), False, _NONE, _b_bias_table),
    "mask": (("tokens",), False, st.fixed_dictionaries({"keep": I(0, 7)}), _b_mask),
    "chunk": (BATCHED, False, st.fixed_dictionaries({"act": _ACT}), _b_chunk),
    "inplace_add": (BATCHED, True, _BODY, _b_inplace_add),
    "autocast_off": (BATCHED, True, _BODY, _b_autocast_off),
    "group_norm": (SPATIAL, False, st.fixed_dictionaries({"groups": I(0, 5)}), _b_group_norm),
    "ring_state": (("seq",), False, st.fixed_dictionaries({"k": I(1, 4)}), _b_ring_state),
    "recurrent_state": (("tokens",), False, st.fixed_dictionaries(
        {"cell": st.sampled_from(("gru", "lstm")), "hidden": I(1, 12), "layers": I(1, 2)}),
        _b_recurrent_state),
}

# Size limits that keep every network small (the compile of one takes seconds).
MAX_ELEMENTS = 4096  # per sample, any tensor between blocks


def applicable(kind: str, batched: bool, names=None) -> list[str]:
    """The block names that apply to a tensor of ``kind`` (batched or not), in table order."""
    out = []
    for name, (kinds, unbatched, _, _) in BLOCKS.items():
        if names is not None and name not in names:
            continue
        if kind not in kinds:
            continue
        if batched and unbatched == "only":
            continue
        if not batched and not unbatched:
            continue
        out.append(name)
    return out


def _input_shape(spec) -> tuple[int, ...]:
    kind, batch, *sizes = spec["input"]
    return tuple(sizes) if batch == 0 else (batch, *sizes)


def _steps(spec):
    """Yield (name, module, kind, batched, shape after) for each block of ``spec``."""
    kind, batch = spec["input"][0], spec["input"][1]
    batched = batch != 0
    shape = _input_shape(spec)
    x = torch.zeros(shape)
    for name, params in spec["blocks"]:
        if name not in applicable(kind, batched):
            continue  # a block that does not apply here (a hand-edited spec): skipped
        module, new_kind = BLOCKS[name][3](kind, shape if batched else (1, *shape), params)
        module.eval()
        with torch.no_grad():
            y = module(x)
        if isinstance(module, STATEFUL):
            module.reset()  # the shape run wrote the state: the network starts from zeros
        if name == "batch":
            batched = True
        kind, shape, x = new_kind, tuple(y.shape), y
        yield name, module, kind, batched, shape


TEST_INPUTS = 8
"""Held-out inputs the contract is measured on, all outputs together: a small output of one
input makes an SQNR swing by several dB."""


def build(spec):
    """(module, example inputs, calibration samples, test samples) of ``spec``: the weights
    from ``spec["seed"]``, the data from ``spec["seed"] + 1``."""
    torch.manual_seed(spec["seed"])
    steps = [m for _, m, _, _, _ in _steps(spec)]
    model = FuzzNet(steps).eval()
    shape = _input_shape(spec)
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    example = (torch.randn(shape, generator=g),)
    calibration = [example] + [(torch.randn(shape, generator=g),)
                               for _ in range(spec["calibration"] - 1)]
    tests = [(torch.randn(shape, generator=g),) for _ in range(TEST_INPUTS)]
    return model, example, calibration, tests


# --- the strategy ------------------------------------------------------------------------------
_INPUTS = {
    "image": lambda: st.tuples(I(1, 8), I(1, 10), I(1, 10)),
    "seq": lambda: st.tuples(I(1, 12), I(1, 24)),
    "tokens": lambda: st.tuples(I(1, 8), I(1, 16)),
    "flat": lambda: st.tuples(I(1, 32)),
}


@st.composite
def specs(draw, max_blocks: int = 5, blocks=None, params=None, unbatched: bool = True,
          min_blocks: int = 1, exclude=None):
    """A network spec of ``min_blocks`` to ``max_blocks`` blocks (fewer when the size limit
    drops some). ``blocks``: the block names allowed (default all); ``params``: a dict of
    block name -> replacement strategy of its raw choices (to pin options, e.g. pooling
    without ceil mode); ``unbatched``: whether unbatched image / seq inputs may be drawn;
    ``exclude(blocks so far, name, kind)``: True leaves block ``name`` out at that point."""
    params = params or {}
    kind = draw(st.sampled_from(tuple(_INPUTS)))
    sizes = draw(_INPUTS[kind]())
    batch = draw(I(0 if unbatched and kind in SPATIAL else 1, 3))
    spec = {"input": (kind, batch, *sizes), "blocks": [], "seed": draw(I(0, 1000)),
            "calibration": draw(I(2, 4))}
    batched, shape = batch != 0, _input_shape(spec)
    for _ in range(draw(I(min_blocks, max_blocks))):
        names = [n for n in applicable(kind, batched, blocks)
                 if exclude is None or not exclude(spec["blocks"], n, kind)]
        if not names:
            break
        name = draw(st.sampled_from(names))
        p = draw(params.get(name, BLOCKS[name][2]))
        trial = dict(spec, blocks=spec["blocks"] + [(name, p)])
        try:
            *_, (_, _, new_kind, new_batched, new_shape) = _steps(trial)
        except ValueError:
            continue  # PyTorch refuses it at this shape (a group norm of one value): drop it
        if math.prod(new_shape) > MAX_ELEMENTS * max(1, shape[0] if batched else 1):
            continue  # too large: drop the block
        spec = trial
        kind, batched, shape = new_kind, new_batched, new_shape
    if not spec["blocks"]:
        spec["blocks"] = [("act", {"act": "relu"})]
    return spec


def spec_size(spec) -> tuple[int, int]:
    """An order for "smaller spec": fewer blocks, then fewer input elements."""
    return len(spec["blocks"]), math.prod(_input_shape(spec))


# --- the check ---------------------------------------------------------------------------------
class FuzzFailure(AssertionError):
    """A spec broke the contract; ``kind`` is a short class label for grouping."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


def classify_compile_error(exc: BaseException) -> str | None:
    """None when ``exc`` is a deliberate refusal of the model (an ``UnsupportedModelError``
    raised on purpose: the flow saw a node it does not handle); otherwise the failure's label.
    Failures: any exception that is no ``McuNpuError``, any other ``McuNpuError`` (a valid
    model never gets a ``ConfigError``), an ``UnsupportedModelError`` that only wraps a crash
    inside ExecuTorch / torch / an NPU compiler (``errors.stage`` sets ``.stage`` on those),
    and a ``ConversionError`` (the partitioner placed a node on the NPU the converter then
    could not convert)."""
    from mcu_npu.errors import ConversionError, UnsupportedModelError

    if isinstance(exc, ConversionError):
        return "ConversionError"
    if isinstance(exc, UnsupportedModelError):
        if getattr(exc, "stage", None) is None:
            return None
        return f"UnsupportedModelError(stage: {exc.stage})"
    return type(exc).__name__


def check(spec, target: str, npu_compiler: str = "auto"):
    """Compile ``spec`` for ``target`` and check it. Returns "ok" or "unsupported" (a
    deliberate ``UnsupportedModelError``); raises ``FuzzFailure`` otherwise. ``target`` may
    name an activation precision after a slash (``corstone-300/int16``). The checks:

    - the builder's module exports (a failure there is the fuzzer's own bug: label "export");
    - the compile succeeds or refuses the model on purpose (``classify_compile_error``);
    - ExecuTorch's runtime loads the .pte with the model's input / output metadata;
    - every delegate call passes the device runtimes' I/O rules, and ExecuTorch's runtime
      runs the program to the host run's outputs (``check_device_runtimes``);
    - the host run holds the numerics contract against the quantized reference evaluated
      exactly (``run_exact``): every output within one output quantization step of it, or,
      for a whole network where steps add up across layers, the SQNR against the float
      model within 1 dB of the reference's."""
    import mcu_npu
    from .checks import assert_loads_in_executorch
    from mcu_npu.estimate.metrics import sqnr_db
    from mcu_npu.quantization.exact import run_exact

    model, example, calibration, tests = build(spec)
    target, _, precision = target.partition("/")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            prog = mcu_npu.compile(model, example, target=target, calibration=calibration,
                                   npu_compiler=npu_compiler, precision=precision or None)
        except Exception as exc:  # noqa: BLE001
            label = classify_compile_error(exc)
            if label is None:
                return "unsupported"
            if getattr(exc, "stage", None) == "exporting the model":
                label = "export (a builder bug)"
            raise FuzzFailure(f"compile {label}", _first(exc)) from exc
        try:
            outs = [prog.run(*t) for t in tests]
        except Exception as exc:  # noqa: BLE001
            raise FuzzFailure(f"run {type(exc).__name__}", _first(exc)) from exc
    try:
        assert_loads_in_executorch(prog.buffer, tests[0], outs[0])
    except AssertionError as exc:
        raise FuzzFailure("executorch load", _first(exc)) from exc
    check_device_runtimes(prog, tests[0], outs[0])
    with torch.no_grad():
        if any(isinstance(m, STATEFUL) for m in model.modules()):
            floats, refs = _stream_runs(model, prog, tests)
        else:
            floats = [model(*t) for t in tests]
            refs = [run_exact(prog.reference, *t) for t in tests]
    refs = [r if isinstance(r, (list, tuple)) else [r] for r in refs]
    floats = [f if isinstance(f, (list, tuple)) else [f] for f in floats]
    steps = _output_steps(prog.reference)
    worst = 0.0
    for got, ref, flo in zip(outs, refs, floats):
        if len(got) != len(flo) or any(g.shape != f.shape for g, f in zip(got, flo)):
            raise FuzzFailure("output shape", f"{[tuple(g.shape) for g in got]} vs "
                                              f"{[tuple(f.shape) for f in flo]}")
        if any(not torch.isfinite(g).all() for g in got):
            raise FuzzFailure("numerics", "non-finite host output")
        if steps is not None:
            for g, r, s in zip(got, ref, steps):
                err = float((g - r.float()).abs().max())
                worst = max(worst, err / s if s > 0 else (0.0 if err == 0 else math.inf))
    if steps is not None and worst <= 1.0 + 1e-3:
        return "ok"
    flo = torch.cat([t.flatten() for f in floats for t in f])
    run = torch.cat([t.flatten() for g in outs for t in g])
    ref = torch.cat([t.flatten().float() for r in refs for t in r])
    s_run, s_ref = sqnr_db(flo, run), sqnr_db(flo, ref)
    if not s_run >= s_ref - 1.0:
        raise FuzzFailure("numerics", f"host run SQNR {s_run:.2f} dB < reference {s_ref:.2f} dB"
                                      f" - 1 (worst output error {worst:.1f} steps)")
    return "ok"


def _stream_runs(model, prog, tests) -> tuple[list, list]:
    """(float outputs, exact reference outputs) of a network keeping state, over ``tests``
    as a stream from the initial state: the program ran them in order after its compile,
    so do the float model (a copy: its buffers carry the state) and the reference, whose
    state is inputs and outputs after the model's own."""
    import copy

    from mcu_npu.program_state import ProgramState, StateTensor
    from mcu_npu.quantization.exact import run_exact

    stream = copy.deepcopy(model)
    floats = [stream(*t) for t in tests]
    first = floats[0] if isinstance(floats[0], (list, tuple)) else [floats[0]]
    state = ProgramState(tuple(StateTensor(t["name"], model.get_buffer(t["name"]).clone())
                               for t in prog.report.state), len(tests[0]), len(first))
    step = state.stepper(lambda *a: run_exact(prog.reference, *a))
    return floats, [step(*t) for t in tests]


def check_device_runtimes(prog, sample, host_outputs) -> None:
    """The program's delegate calls pass the device runtimes' I/O rules (element types, sizes
    and counts: ``firmware.check.io_problems_of``), and ExecuTorch's own C++ runtime runs it
    to the host run's outputs, bit for bit."""
    from .checks import assert_same_outputs
    from mcu_npu.firmware.check import io_problems_of
    from mcu_npu.runtime.pte import Program

    problems = io_problems_of(Program(prog.buffer, prog.host_data))
    if problems:
        raise FuzzFailure("device I/O", problems[0])
    try:
        prog.reset_state()  # ``host_outputs`` is the first call's, from the initial state
        outputs = prog.run(*sample, runtime="executorch")
    except Exception as exc:  # noqa: BLE001
        raise FuzzFailure(f"executorch run {type(exc).__name__}", _first(exc)) from exc
    try:
        assert_same_outputs(host_outputs, outputs, "the host runtime", "ExecuTorch's runtime")
    except AssertionError as exc:
        raise FuzzFailure("executorch differs", _first(exc)) from exc


def _output_steps(reference) -> list[float] | None:
    """The quantization step of each output of the quantized reference (the scale of its
    final per-tensor dequantize); None when an output has none (it ends in a reshape, a
    selection or a float op)."""
    dequantize = {torch.ops.quantized_decomposed.dequantize_per_tensor.default,
                  torch.ops.quantized_decomposed.dequantize_per_tensor.tensor}
    out = [n for n in reference.graph.nodes if n.op == "output"][0]
    args = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    steps = []
    for a in args:
        if not isinstance(a, torch.fx.Node) or a.target not in dequantize:
            return None
        scale = a.args[1]
        if isinstance(scale, torch.fx.Node):
            scale = getattr(reference, scale.target, None) if scale.op == "get_attr" else None
        if scale is None:
            return None
        steps.append(float(scale))
    return steps


def _first(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
