"""Models that keep state between calls, in the ways users write them for a stream of frames:
state in a registered buffer written in place (a GRU's or LSTM's hidden state, a ring of past
frames, per-layer rings of a streaming depthwise-separable temporal conv net with a running
average), and a recurrent cell taking its state as an input and returning the new one."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RingConv(nn.Module):
    """A temporal convolution over a ring of the last frames: ``cat`` of the ring and the
    new frame, the ring shifted by a slice written back."""

    def __init__(self, channels=8, kernel=3, width=16):
        super().__init__()
        self.register_buffer("ring", torch.zeros(1, channels, kernel - 1))
        self.conv = nn.Conv1d(channels, width, kernel)
        self.head = nn.Linear(width, 4)

    def forward(self, x):  # (1, channels, 1)
        window = torch.cat([self.ring, x], dim=2)
        self.ring.copy_(window[:, :, 1:])
        return self.head(F.relu(self.conv(window)).flatten(1))


class BufferGRU(nn.Module):
    """A GRU cell whose hidden state is a buffer."""

    def __init__(self, features=10, hidden=16):
        super().__init__()
        self.register_buffer("h", torch.zeros(1, hidden))
        self.cell = nn.GRUCell(features, hidden)
        self.head = nn.Linear(hidden, 4)

    def forward(self, x):  # (1, features)
        h = self.cell(x, self.h)
        self.h.copy_(h)
        return self.head(h)


class BufferLSTM(nn.Module):
    """An LSTM cell whose hidden and cell states are buffers."""

    def __init__(self, features=10, hidden=16):
        super().__init__()
        self.register_buffer("h", torch.zeros(1, hidden))
        self.register_buffer("c", torch.zeros(1, hidden))
        self.cell = nn.LSTMCell(features, hidden)
        self.head = nn.Linear(hidden, 4)

    def forward(self, x):
        h, c = self.cell(x, (self.h, self.c))
        self.h.copy_(h)
        self.c.copy_(c)
        return self.head(h)


class StreamingDSCNN(nn.Module):
    """A streaming depthwise-separable temporal conv net: a ring per depthwise layer and a
    running average over the last ``average`` frames before a linear head."""

    def __init__(self, features=10, width=16, average=4):
        super().__init__()
        self.inp = nn.Conv1d(features, width, 1)
        self.register_buffer("ring1", torch.zeros(1, width, 2))
        self.dw1, self.pw1 = nn.Conv1d(width, width, 3, groups=width), nn.Conv1d(width, width, 1)
        self.register_buffer("ring2", torch.zeros(1, width, 2))
        self.dw2, self.pw2 = nn.Conv1d(width, width, 3, groups=width), nn.Conv1d(width, width, 1)
        self.register_buffer("last", torch.zeros(1, width, average - 1))
        self.head = nn.Linear(width, 4)

    def forward(self, x):  # (1, features, 1)
        y = F.relu(self.inp(x))
        window = torch.cat([self.ring1, y], 2)
        self.ring1.copy_(window[:, :, 1:])
        y = F.relu(self.pw1(F.relu(self.dw1(window))))
        window = torch.cat([self.ring2, y], 2)
        self.ring2.copy_(window[:, :, 1:])
        y = F.relu(self.pw2(F.relu(self.dw2(window))))
        window = torch.cat([self.last, y], 2)
        self.last.copy_(window[:, :, 1:])
        return self.head(window.mean(2))


class CellIO(nn.Module):
    """A recurrent cell with its state passed in and out: the firmware keeps it."""

    def __init__(self, kind="gru", features=10, hidden=16):
        super().__init__()
        self.cell = {"gru": nn.GRUCell, "rnn": nn.RNNCell}[kind](features, hidden)
        self.head = nn.Linear(hidden, 4)

    def forward(self, x, h):
        h = self.cell(x, h)
        return self.head(h), h


class LSTMCellIO(nn.Module):
    def __init__(self, features=10, hidden=16):
        super().__init__()
        self.cell = nn.LSTMCell(features, hidden)
        self.head = nn.Linear(hidden, 4)

    def forward(self, x, h, c):
        h, c = self.cell(x, (h, c))
        return self.head(h), h, c


class OneStepGRU(nn.Module):
    """``nn.GRU`` called on one frame with an explicit initial state."""

    def __init__(self, features=10, hidden=16):
        super().__init__()
        self.gru = nn.GRU(features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 4)

    def forward(self, x, h):  # (1, 1, features), (1, 1, hidden)
        y, h = self.gru(x, h)
        return self.head(y[:, -1]), h


BUFFERED = {"ring_conv": (RingConv, (1, 8, 1)), "buffer_gru": (BufferGRU, (1, 10)),
            "buffer_lstm": (BufferLSTM, (1, 10)), "streaming_dscnn": (StreamingDSCNN, (1, 10, 1))}
"""name -> (module class, frame shape) of the models keeping state in buffers."""


def frames(shape, count: int, seed: int = 0) -> list[tuple]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=g),) for _ in range(count)]


def carried(model: nn.Module, frame_shape, count: int, seed: int = 0) -> list[tuple]:
    """A stream of ``count`` calls of a model taking its state as its later inputs and
    returning it as its later outputs: each call's state is the float model's from the
    call before (zeros first)."""
    g = torch.Generator().manual_seed(seed)
    shapes = [p.shape for p in _state_shapes(model)]
    state = tuple(torch.zeros(s) for s in shapes)
    out = []
    with torch.no_grad():
        for _ in range(count):
            x = torch.randn(*frame_shape, generator=g)
            out.append((x, *state))
            state = tuple(t.detach() for t in model(x, *state)[1:])
    return out


def _state_shapes(model):
    if isinstance(model, OneStepGRU):
        return [torch.empty(1, 1, model.gru.hidden_size)]
    hidden = model.cell.hidden_size
    return [torch.empty(1, hidden)] * (2 if isinstance(model, LSTMCellIO) else 1)
