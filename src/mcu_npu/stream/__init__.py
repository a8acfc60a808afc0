"""Sequence model -> stream: ``streaming(model, example_inputs)`` turns a causal sequence
model into its one-frame-per-call form with state buffers (``Stream``)."""

from .state import FrameRing, RecurrentState, RunningStatistic, StreamState
from .convert import Stream, streaming

__all__ = ["streaming", "Stream", "StreamState", "FrameRing", "RunningStatistic",
           "RecurrentState"]
