"""``streaming(model, example_inputs)``: a causal sequence model's one-frame-per-call form.

The result, a ``Stream``, takes one frame (the sequence input with a time axis of size 1)
per call and returns what the sequence model returns on all frames so far: its output at
frame t equals ``model(frames 1..t)`` (time-carrying outputs come as their frame t). State
lives in registered buffers updated in place, which ``torch.export`` records as buffer
mutations and ``mcu_npu.compile`` keeps between runs.
"""

from __future__ import annotations

import warnings

import torch
from torch import fx, nn

from ..upstream.private import pytree
from mcu_npu.errors import ConfigError, UnsupportedModelError

from .rewrite import STATE_ATTR, FrameGraph, marker_length
from .state import StreamState

CHECK_TOLERANCE = 1e-4
"""Largest difference, relative to the output's largest value, between the stream's last
output and the model's on ``example_inputs`` that the conversion's self-check accepts."""


class Stream(nn.Module):
    """The one-frame form of a sequence model: ``stream(frame)`` per frame, in order;
    ``reset_state()`` starts a new sequence."""

    def __init__(self, step: fx.GraphModule, out_spec, frame: torch.Tensor, time_dim: int):
        super().__init__()
        self.step = step
        self._out_spec = out_spec
        self.time_dim = time_dim
        self.example_frame = frame

    def forward(self, frame: torch.Tensor):
        return pytree.tree_unflatten(list(self.step(frame)), self._out_spec)

    def reset_state(self) -> None:
        """Set every state buffer back to its value before frame 1 (zeros, the model's
        padding values, a recurrent layer's initial state)."""
        for m in self.modules():
            if isinstance(m, StreamState):
                m.reset()

    def frames(self, sequence: torch.Tensor):
        """The sequence's frames along the time axis, each keeping a time axis of size 1."""
        return sequence.split(1, dim=self.time_dim)


def streaming(model: nn.Module, example_inputs, *, time_dim: int = -1,
              check: bool = True) -> Stream:
    """The stream of causal sequence model ``model``: state buffers in place of its causal
    padding, recurrences and pooling over time (see ``mcu_npu.stream.rewrite`` for what is
    recognised); a non-causal layer raises ``UnsupportedModelError`` naming it.

    ``example_inputs``: one sequence the model takes (a tensor or a 1-tuple), its time axis
    ``time_dim`` (-1 for ``(N, C, T)``, 1 for batch_first ``(N, T, F)``). With ``check`` the
    stream is run over it and its last output compared with the model's.
    """
    sequence = _one_sequence(example_inputs)
    ndim = sequence.dim()
    if not -ndim <= time_dim < ndim:
        raise ConfigError(f"time_dim={time_dim} is not an axis of the {ndim}-D example input "
                          f"{tuple(sequence.shape)}; give the time axis (-1 for (N, C, T)).")
    time_dim %= ndim
    model = model.eval()
    length = marker_length(model, tuple(sequence.shape), time_dim)
    shape = list(sequence.shape)
    shape[time_dim] = length
    marker = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(sequence.dtype)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.export(model, (marker,))
    except Exception as e:  # noqa: BLE001 - any export failure means the same to the user
        raise UnsupportedModelError(
            f"the model does not export on a sequence of {length} frames ({type(e).__name__}:"
            f" {str(e).splitlines()[0] if str(e) else ''}); a model to stream must take "
            "sequences of any length.") from e
    gm = ep.module()
    values = _values(gm, marker)
    builder = FrameGraph(gm, values, length, time_dim)
    graph = builder.build()
    gm.add_module(STATE_ATTR, builder.states)
    step = fx.GraphModule(gm, graph, class_name="FrameStep")
    step.graph.eliminate_dead_code()  # state updates are impure (StreamState._is_impure)
    step.recompile()
    frame = sequence.narrow(time_dim, 0, 1).clone()
    stream = Stream(step, ep.call_spec.out_spec, frame, time_dim)
    if check:
        _check(stream, model, sequence)
    return stream


def _one_sequence(example_inputs) -> torch.Tensor:
    if isinstance(example_inputs, torch.Tensor):
        return example_inputs
    if (isinstance(example_inputs, (tuple, list)) and len(example_inputs) == 1
            and isinstance(example_inputs[0], torch.Tensor)):
        return example_inputs[0]
    raise ConfigError("streaming takes one example sequence (a tensor or a 1-tuple of one), "
                      f"got {type(example_inputs).__name__}; models with several inputs "
                      "are not streamed.")


def _values(gm: fx.GraphModule, marker: torch.Tensor) -> dict:
    """Every node's value on the marker sequence (recurrent initial states are read here)."""
    interp = fx.Interpreter(gm, garbage_collect_values=False)
    with torch.no_grad():
        interp.run(marker)
    return interp.env


@torch.no_grad()
def _check(stream: Stream, model: nn.Module, sequence: torch.Tensor) -> None:
    """The stream's output after the whole example equals the model's on it."""
    for frame in stream.frames(sequence):
        got = stream(frame)
    want = model(sequence)
    stream.reset_state()
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want)):
        w = w.select(stream.time_dim, -1).unsqueeze(stream.time_dim) if g.shape != w.shape else w
        scale = float(w.abs().max()) or 1.0
        err = float((g - w).abs().max()) / scale
        if err > CHECK_TOLERANCE:
            raise UnsupportedModelError(
                f"the stream's last output differs from the model's by {err:.2e} (relative) "
                "on the example sequence: the model does something per frame the stream "
                "conversion does not model; please report it with the model.")
