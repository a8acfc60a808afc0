"""The garbage collector during a compile: the objects alive when it starts are left out of
the collector's passes."""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager

_LOCK = threading.Lock()
_STATE = {"depth": 0, "froze": False}


@contextmanager
def earlier_objects_frozen():
    """Within the block, the objects that existed when it was entered sit in the collector's
    permanent generation (``gc.freeze``); on leaving they go back to its oldest one
    (``gc.unfreeze``).

    Why: after importing torch, torchao and ExecuTorch a process tracks some 600,000
    objects, and each full collection walks them all (about 0.17 s); a small model's
    compile makes several such collections' worth of objects. Frozen, a full collection
    walks only what the compile made. Nothing is lost: garbage among the frozen objects is
    collected after the block. Nested and concurrent blocks freeze once; a process that
    froze objects itself, or disabled the collector, is left as it is."""
    with _LOCK:
        if _STATE["depth"] == 0:
            _STATE["froze"] = gc.isenabled() and gc.get_freeze_count() == 0
            if _STATE["froze"]:
                gc.freeze()
        _STATE["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _STATE["depth"] -= 1
            if _STATE["depth"] == 0 and _STATE["froze"]:
                _STATE["froze"] = False
                gc.unfreeze()
