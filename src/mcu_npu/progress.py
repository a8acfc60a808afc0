"""Progress of a compile: one line per stage with the time elapsed since the compile began.

The flow names its steps with ``errors.stage`` ("exporting the model", "quantizing and
calibrating", ...); while a ``Progress`` is active (``with Progress(stream).active(): ...``)
each step prints as it first starts. On a terminal the lines go through
tqdm, which also draws a bar for the calibration samples (``counted``); elsewhere (a log
file, a pipe, CI) they are plain lines and no bar.
"""

from __future__ import annotations

import contextlib
import sys
import time
from contextvars import ContextVar
from typing import Iterable, Iterator, TextIO

_ACTIVE: ContextVar["Progress | None"] = ContextVar("mcu_npu_progress", default=None)


class Progress:
    """Stage lines on ``stream`` (default stderr), ``[  4.2 s] quantizing and calibrating``;
    ``bars``: tqdm bars and lines (default: when ``stream`` is a terminal)."""

    def __init__(self, stream: TextIO | None = None, bars: bool | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.bars = _is_terminal(self.stream) if bars is None else bars
        self.start = time.monotonic()
        self._shown: set[str] = set()

    @contextlib.contextmanager
    def active(self) -> Iterator["Progress"]:
        """Show the stages of what runs inside, then the total time."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)
        self.line("done")

    def line(self, text: str) -> None:
        message = f"[{time.monotonic() - self.start:6.1f} s] {text}"
        if self.bars:
            from tqdm import tqdm

            tqdm.write(message, file=self.stream)
        else:
            self.stream.write(message + "\n")
            self.stream.flush()

    def begin(self, name: str) -> None:
        """A stage starts: its line, the first time it does (the flow returns to some, as
        delegating to the NPU, several times)."""
        if name not in self._shown:
            self._shown.add(name)
            self.line(name)


def begin(name: str) -> None:
    """Tell the active ``Progress`` (if any) that the stage ``name`` starts."""
    progress = _ACTIVE.get()
    if progress is not None:
        progress.begin(name)


def counted(items: Iterable, what: str) -> Iterable:
    """``items``, with a tqdm bar of ``what`` while they are consumed when the active
    ``Progress`` draws bars; ``items`` unchanged otherwise."""
    progress = _ACTIVE.get()
    if progress is None or not progress.bars:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=what, unit="sample", leave=False, file=progress.stream)


def reporting(show: bool | None):
    """The context a compile runs in for ``compile(progress=show)``: stage lines on stderr
    when ``show`` (None: when stderr is a terminal), nothing when False or when a
    ``Progress`` is already active (an outer compile shows its own)."""
    if show is None:
        show = _is_terminal(sys.stderr)
    if not show or _ACTIVE.get() is not None:
        return contextlib.nullcontext()
    return Progress().active()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
