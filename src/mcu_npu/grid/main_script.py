"""The pool's workers and the script being run (``__main__``).

A ``forkserver`` (or ``spawn``) worker normally runs the parent's main script again, as
``__mp_main__``, so that objects defined in it can be unpickled there; a script calling
``mcu_npu.compare`` at its top level (no ``if __name__ == "__main__":``) then calls it again
in every worker, which dies starting up. The grid's cells name their models by factories in
other files or modules, so its workers need nothing of ``__main__``: ``context()`` makes
workers that do not run it (the ``init_main_from_*`` entries are left out of the data the
parent sends a new worker; ``multiprocessing.spawn.get_preparation_data`` is wrapped once,
and the wrapper acts only in the thread starting one of these workers, while it does).

A cell that does need ``__main__`` (a factory or option defined in the script itself:
``main_names``) runs in ordinary workers, which need the script's call guarded, as does a
factory named as ``"that_script.py:factory"`` (``main_file_factories``: a worker imports
the script); when it is not (``unguarded_call``), the grid refuses with what to change.
"""

from __future__ import annotations

import ast
import multiprocessing
import multiprocessing.context
import multiprocessing.spawn
import pickle
import pickletools
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

_state = threading.local()
_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")


def _preparation_data(original):
    def get_preparation_data(name, *args, **kwargs):
        data = original(name, *args, **kwargs)
        if getattr(_state, "without_main", False):
            for key in _MAIN_KEYS:
                data.pop(key, None)
        return data

    get_preparation_data.wrapped_by_mcu_npu = original
    return get_preparation_data


@contextmanager
def _without_main():
    spawn = multiprocessing.spawn
    if not hasattr(spawn.get_preparation_data, "wrapped_by_mcu_npu"):
        spawn.get_preparation_data = _preparation_data(spawn.get_preparation_data)
    _state.without_main = True
    try:
        yield
    finally:
        _state.without_main = False


class _WorkerProcess(multiprocessing.context.ForkServerProcess):
    """A forkserver process that does not run the parent's main script."""

    @staticmethod
    def _Popen(process_obj):
        with _without_main():
            return multiprocessing.context.ForkServerProcess._Popen(process_obj)


class _WorkerContext(multiprocessing.context.ForkServerContext):
    Process = _WorkerProcess


def context(with_main: bool) -> multiprocessing.context.BaseContext:
    """The forkserver context of a pool: its workers run the main script only
    ``with_main``."""
    return multiprocessing.get_context("forkserver") if with_main else _WorkerContext()


def main_names(objects) -> list[str]:
    """The names of what ``objects`` refer to in ``__main__`` (found in their pickle: a
    worker must import the main script to unpickle them); [] when they do not pickle."""
    try:
        data = pickle.dumps(list(objects), protocol=2)  # every global as one GLOBAL opcode
    except Exception:  # noqa: BLE001  (the pool reports what does not pickle)
        return []
    names = []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            module, _, name = arg.partition(" ")
            if module in ("__main__", "__mp_main__") and name not in names:
                names.append(name)
    return names


def main_file_factories(sources) -> list[str]:
    """The factories of ``sources`` named as ``"file.py:factory"`` with the main script as
    the file (a worker imports it, running its top level, to find them)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if path is None:
        return []
    main = Path(path).resolve()
    return [s.rpartition(":")[2] for s in sources if isinstance(s, str) and
            s.rpartition(":")[0].endswith(".py") and Path(s.rpartition(":")[0]).resolve() == main]


def unguarded_call() -> str | None:
    """``file:line`` of the main script's top-level statement running this call when it is
    outside an ``if __name__ == "__main__":`` block (a worker running the script would run
    it again), else None (guarded, not called from the script's top level, or no source)."""
    main = sys.modules.get("__main__")
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is getattr(main, "__dict__", None)
                                     and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:
        return None
    path, line = frame.f_code.co_filename, frame.f_lineno
    try:
        tree = ast.parse(Path(path).read_text(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test) and \
                node.body[0].lineno <= line <= node.body[-1].end_lineno:
            return None
    return f"{path}:{line}"


def _is_main_test(test: ast.expr) -> bool:
    """``test`` is ``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and
            isinstance(test.ops[0], ast.Eq)):
        return False
    sides = {ast.dump(test.left), ast.dump(test.comparators[0])}
    return sides == {ast.dump(ast.Name("__name__", ast.Load())),
                     ast.dump(ast.Constant("__main__"))}
