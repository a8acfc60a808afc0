"""Attention as libraries write it: one small module per spelling. ``FACTORIES[name](width,
heads, tokens)`` makes one; ``spelling(name)`` gives ``(module, example_inputs)`` at the test
size.

Each spelling computes self-attention over ``x`` [1, TOKENS, WIDTH] with HEADS heads; what
differs is how the scores, the scale and the mask are written: ``nn.MultiheadAttention``,
``F.scaled_dot_product_attention`` (no mask, boolean mask, float mask, causal, ``scale=``),
an eager ``softmax(q @ k^T * s + bias)``, masks built at run time from a constant or all-ones
padding mask (``== 0``, ``.any()``, ``.all()``, ``expand``, ``masked_fill``, ``where``,
``torch.finfo(dtype).min``), and a relative-position bias table read through an index buffer.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

WIDTH, HEADS, TOKENS = 16, 2, 8


class _Heads(nn.Module):
    """qkv projection into heads [B, H, T, D] and the output projection back."""

    def __init__(self, width=WIDTH, heads=HEADS, tokens=TOKENS):
        super().__init__()
        self.width, self.heads, self.tokens, self.head = width, heads, tokens, width // heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def split(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, self.head).permute(2, 0, 3, 1, 4)
        return q, k, v

    def merge(self, y):
        b, _, t, _ = y.shape
        return self.proj(y.transpose(1, 2).reshape(b, t, self.width))


class MultiheadAttention(nn.Module):
    def __init__(self, width=WIDTH, heads=HEADS, tokens=TOKENS):
        super().__init__()
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class MultiheadAttentionPadding(nn.Module):
    """``nn.MultiheadAttention`` with a constant ``key_padding_mask`` (last token padded)."""

    def __init__(self, width=WIDTH, heads=HEADS, tokens=TOKENS):
        super().__init__()
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        pad = torch.zeros(1, tokens, dtype=torch.bool)
        pad[:, -1] = tokens > 1  # a key left to attend to
        self.register_buffer("pad", pad)

    def forward(self, x):
        pad = self.pad.expand(x.shape[0], -1)
        return self.attn(x, x, x, key_padding_mask=pad, need_weights=False)[0]


class Sdpa(_Heads):
    """``F.scaled_dot_product_attention`` with the keyword arguments given at construction; a
    mask (if any) is a buffer."""

    def __init__(self, width=WIDTH, heads=HEADS, tokens=TOKENS, mask=None, **kwargs):
        super().__init__(width, heads, tokens)
        self.kwargs = kwargs
        self.register_buffer("mask", None if mask is None else mask(tokens))

    def forward(self, x):
        q, k, v = self.split(x)
        extra = {"attn_mask": self.mask} if self.mask is not None else {}
        return self.merge(F.scaled_dot_product_attention(q, k, v, **extra, **self.kwargs))


def _band(tokens: int) -> torch.Tensor:
    i = torch.arange(tokens)
    return (i[:, None] - i[None, :]).abs() <= 2  # True: attend


class Eager(_Heads):
    """``softmax(q @ k^T * s + bias)`` with a learned additive bias per head."""

    def __init__(self, width=WIDTH, heads=HEADS, tokens=TOKENS):
        super().__init__(width, heads, tokens)
        self.bias = nn.Parameter(torch.randn(heads, tokens, tokens) * 0.5)

    def forward(self, x):
        q, k, v = self.split(x)
        scores = q @ k.transpose(-2, -1) * self.head ** -0.5 + self.bias
        return self.merge(scores.softmax(-1) @ v)


class PaddingMask(_Heads):
    """The text-encoder way: a padding mask (a constant buffer, all ones or not) becomes an
    additive mask at run time: ``== 0``, ``.any()`` / ``.all()`` deciding whether masking is
    needed (as a tensor, the way traced library code writes it), ``expand`` to the heads,
    ``masked_fill`` or ``where`` with ``torch.finfo(dtype).min``, then SDPA or an eager
    softmax."""

    def __init__(self, width=WIDTH, heads=HEADS, tokens=TOKENS, fill="masked_fill",
                 eager=False, reduce="any", ones=True):
        super().__init__(width, heads, tokens)
        self.fill, self.eager, self.reduce = fill, eager, reduce
        mask = torch.ones(1, tokens, dtype=torch.long)
        if not ones:
            mask[:, max(1, tokens - 2):] = 0  # the last two tokens, keeping one
        self.register_buffer("padding", mask)

    def forward(self, x):
        q, k, v = self.split(x)
        b, t = x.shape[:2]
        keep = self.padding
        pad = keep == 0
        needed = pad.any() if self.reduce == "any" else ~(keep.bool().all())
        # masking only if needed, decided as a tensor
        full = (pad & needed)[:, None, None, :].expand(b, self.heads, t, t)
        low = torch.finfo(x.dtype).min
        if self.fill == "masked_fill":
            bias = torch.zeros(full.shape, dtype=x.dtype).masked_fill(full, low)
        else:
            bias = torch.where(full, torch.tensor(low, dtype=x.dtype),
                               torch.tensor(0.0, dtype=x.dtype))
        if self.eager:
            scores = q @ k.transpose(-2, -1) / self.head ** 0.5 + bias
            return self.merge(F.softmax(scores, dim=-1) @ v)
        return self.merge(F.scaled_dot_product_attention(q, k, v, attn_mask=bias))


class ExtendedMask(_Heads):
    """BERT's extended mask: no padding mask given, so one of ones made in ``forward``, then
    ``(1 - mask[:, None, None, :]) * finfo.min`` added to the eager scores."""

    def forward(self, x):
        q, k, v = self.split(x)
        b, t = x.shape[:2]
        mask = torch.ones(b, t)
        extended = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head) + extended
        return self.merge(nn.functional.softmax(scores, dim=-1) @ v)


class CausalMaskedFill(_Heads):
    """GPT-style eager attention: the scores themselves ``masked_fill``-ed with ``-inf`` above
    the diagonal of a constant lower-triangular buffer."""

    def __init__(self, width=WIDTH, heads=HEADS, tokens=TOKENS):
        super().__init__(width, heads, tokens)
        self.register_buffer("tril", torch.tril(torch.ones(tokens, tokens)))

    def forward(self, x):
        q, k, v = self.split(x)
        scores = q @ k.transpose(-2, -1) * self.head ** -0.5
        scores = scores.masked_fill(self.tril == 0, float("-inf"))
        return self.merge(torch.softmax(scores, dim=-1) @ v)


class RelativePositionBias(_Heads):
    """A learned table of biases indexed by a constant relative-position index buffer (Swin,
    T5-style), added to the scores before the softmax."""

    def __init__(self, width=WIDTH, heads=HEADS, tokens=TOKENS):
        super().__init__(width, heads, tokens)
        self.table = nn.Parameter(torch.randn(2 * tokens - 1, heads) * 0.5)
        i = torch.arange(tokens)
        self.register_buffer("index", (i[:, None] - i[None, :] + tokens - 1).flatten())

    def forward(self, x):
        q, k, v = self.split(x)
        t = self.tokens
        bias = self.table[self.index].view(t, t, self.heads).permute(2, 0, 1)
        scores = (q * self.head ** -0.5) @ k.transpose(-2, -1) + bias.unsqueeze(0)
        return self.merge(scores.softmax(dim=-1) @ v)


def _float_mask(tokens: int) -> torch.Tensor:
    """A band of -1e4 (BERT's fill) plus a small learned-looking bias everywhere."""
    return torch.where(_band(tokens), 0.0, -1e4) + torch.randn(tokens, tokens) * 0.1


FACTORIES = {
    "multihead_attention": MultiheadAttention,
    "multihead_attention_padding": MultiheadAttentionPadding,
    "sdpa": Sdpa,
    "sdpa_bool_mask": partial(Sdpa, mask=_band),
    "sdpa_float_mask": partial(Sdpa, mask=_float_mask),
    "sdpa_causal": partial(Sdpa, is_causal=True),
    "sdpa_scale": partial(Sdpa, scale=0.2),
    "eager_bias": Eager,
    "padding_any_masked_fill": PaddingMask,
    "padding_all_where": partial(PaddingMask, fill="where", reduce="all", ones=False),
    "padding_eager_masked_fill": partial(PaddingMask, eager=True, ones=False),
    "eager_causal_masked_fill": CausalMaskedFill,
    "extended_ones_mask": ExtendedMask,
    "relative_position_bias": RelativePositionBias,
}


def spelling(name: str, seed: int = 0):
    """(module in eval mode, example inputs) of spelling ``name``."""
    torch.manual_seed(seed)
    module = FACTORIES[name]().eval()
    x = torch.randn(1, TOKENS, WIDTH, generator=torch.Generator().manual_seed(seed + 7))
    return module, (x,)
