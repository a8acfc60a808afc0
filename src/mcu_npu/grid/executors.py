"""Running a grid's cells: in worker processes (``concurrent.futures.ProcessPoolExecutor``
with the ``forkserver`` start method, the default; workers that do not run the main script
again: ``main_script``), on a Ray cluster, on an executor the caller
gives, or in this process. Each path hands ``cells.run_cell`` one cell at a time and yields
``(index, row)`` as each cell finishes, in whatever order they finish.

A worker process that dies (a crash inside a native library) breaks its pool; the cells it
left unfinished are run again, each alone in a new single-worker pool, so the cell that
crashes is the one whose row says so.

With a ``timeout`` (seconds per cell) each cell runs in a process of its own, forked from
the same preloaded server, at most ``workers`` at a time; a cell still compiling at its
deadline is stopped and its row says so, and a process that dies is that cell's row."""

from __future__ import annotations

import math
import os
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from multiprocessing.connection import wait
from concurrent.futures.process import BrokenProcessPool
from typing import Iterator, Sequence

from ..errors import ConfigError, first_line
from . import main_script
from .cells import Cell, Row, error_row, run_cell

EXECUTORS = ("process", "ray", "serial")
"""``executor=`` names: worker processes, a Ray cluster, this process."""


def default_workers(cells: int) -> int:
    """Worker processes by default: one per core this process may run on, at most one per
    cell."""
    return max(1, min(_cores(), cells))


def _cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)


def run_cells(cells: Sequence[Cell], executor="process", *, workers: int | None = None,
              ray_address: str | None = None,
              timeout: float | None = None) -> Iterator[tuple[int, Row]]:
    """``(index into cells, row)`` for every cell, as each finishes; ``timeout``: seconds a
    cell may compile (the "process" executor only)."""
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"workers must be a positive number of processes, not {workers!r}")
    check_timeout(timeout, executor)
    if timeout is not None:
        return _timed(cells, workers or default_workers(len(cells)), timeout)
    if isinstance(executor, Executor):
        return _on_executor(cells, executor)
    if executor == "serial":
        return ((i, run_cell(c)) for i, c in enumerate(cells))
    if executor == "process":
        return _in_processes(cells, workers or default_workers(len(cells)))
    if executor == "ray":
        return _on_ray(cells, ray_address, workers)
    raise ConfigError(f"unknown executor {executor!r}; choose one of: {', '.join(EXECUTORS)}, "
                      f"or pass a concurrent.futures.Executor")


def check_timeout(timeout, executor="process") -> float | None:
    """``timeout`` as seconds (None: none); ConfigError for anything else, or for an executor
    that cannot stop a cell."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not 0 < timeout < math.inf:
        raise ConfigError(f"timeout is the seconds a cell may compile, a positive number, not "
                          f"{timeout!r}")
    if executor != "process":
        name = executor if isinstance(executor, str) else type(executor).__name__
        raise ConfigError(f"timeout= stops a cell's process: it needs the 'process' executor, "
                          f"not {name!r}")
    return float(timeout)


def _on_executor(cells, executor: Executor) -> Iterator[tuple[int, Row]]:
    futures = {executor.submit(run_cell, c): i for i, c in enumerate(cells)}
    for future in as_completed(futures):
        i = futures[future]
        yield i, _result(future, cells[i])


def _result(future, cell: Cell) -> Row:
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001  (the worker, not the compile, failed)
        return error_row(cell, f"the worker failed: {type(exc).__name__}: {first_line(exc)}")


PRELOADED = ["mcu_npu.api"]
"""What the server the workers are forked from imports once: the compiler, torch and
ExecuTorch (about 5 s of CPU that each spawned worker would spend again)."""


def _pool(workers: int, with_main: bool = False) -> ProcessPoolExecutor:
    # forkserver: each worker is forked from a server process, a fresh interpreter that
    # imported the compiler and ran nothing; forking this process, whose torch thread
    # pools may have started, can deadlock the child. The workers run the main script
    # only ``with_main`` (a cell needs something defined in it)
    context = main_script.context(with_main)
    context.set_forkserver_preload(PRELOADED)
    return ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                               initargs=(max(1, _cores() // workers),))


_in_worker = False


def _start_worker(threads: int) -> None:
    """A pool worker's start: its share of the cores, and the mark that refuses a grid
    started inside it (a factory's file that starts one when imported would otherwise
    start pools within pools)."""
    global _in_worker
    _in_worker = True
    share_cores(threads)


def share_cores(threads: int) -> None:
    """A worker's share of the cores: torch's and OpenMP's threads at cores / workers, as
    Ray gives each task one core. Workers that each spread over every core slow each other
    down: the 8 x 4 sweep of ``benchmarks/sweep.py`` took 133 s on 2 cores with 2 workers
    of 2 threads, 70 s with 1 worker. Results do not depend on threads (calibration and
    the reference compute in float64)."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)


def _refuse_nested() -> None:
    """ConfigError when this process is a worker of another grid (a factory's file that
    starts a grid when imported would otherwise start pools within pools)."""
    if _in_worker:
        raise ConfigError("a grid was started inside a worker of another grid: the model "
                          "factory's file starts one when imported; put that call under "
                          "`if __name__ == \"__main__\":`")


def _in_processes(cells, workers: int) -> Iterator[tuple[int, Row]]:
    _refuse_nested()
    with_main = _check_main(cells)
    broken: list[int] = []
    pool = _pool(workers, with_main)
    try:
        futures = {pool.submit(run_cell, c): i for i, c in enumerate(cells)}
        for future in as_completed(futures):
            i = futures[future]
            if isinstance(future.exception(), BrokenProcessPool):
                broken.append(i)
                continue
            yield i, _result(future, cells[i])
    finally:  # stopped early (an interrupt): the cells not started are not run
        pool.shutdown(wait=True, cancel_futures=True)
    for i in sorted(broken):  # each alone, so a crash is pinned on its own cell
        with _pool(1, with_main) as pool:
            future = pool.submit(run_cell, cells[i])
            if isinstance(future.exception(), BrokenProcessPool):
                yield i, error_row(cells[i], "the worker process died compiling this cell "
                                   "(a crash in a native library; run it alone with "
                                   "`mcu-npu compile` to see it)")
            else:
                yield i, _result(future, cells[i])


def _timed(cells, workers: int, timeout: float) -> Iterator[tuple[int, Row]]:
    """Each cell in a process of its own, at most ``workers`` at a time, stopped at
    ``timeout`` seconds (module docstring)."""
    _refuse_nested()
    context = main_script.context(_check_main(cells))
    context.set_forkserver_preload(PRELOADED)
    threads = max(1, _cores() // workers)
    waiting = list(enumerate(cells))
    running: dict = {}  # receiving end -> (index, process, deadline)
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                i, cell = waiting.pop(0)
                receiver, sender = context.Pipe(duplex=False)
                process = context.Process(target=_run_timed, args=(cell, sender, threads),
                                          daemon=True)
                process.start()
                sender.close()  # the child holds it: its end closes when the child ends
                running[receiver] = (i, process, time.monotonic() + timeout)
            first = min(deadline for _, _, deadline in running.values())
            for receiver in wait(list(running), max(0.0, first - time.monotonic())):
                i, process, _ = running.pop(receiver)
                try:
                    row = receiver.recv()
                except EOFError:
                    row = error_row(cells[i], "the worker process died compiling this cell "
                                    "(a crash in a native library; run it alone with "
                                    "`mcu-npu compile` to see it)")
                receiver.close()
                process.join()
                yield i, row
            now = time.monotonic()
            for receiver, (i, process, deadline) in list(running.items()):
                if now >= deadline and not receiver.poll():
                    del running[receiver]
                    process.kill()
                    process.join()
                    receiver.close()
                    yield i, error_row(cells[i], f"timed out: still compiling after "
                                       f"{timeout:g} s, stopped (timeout=)")
    finally:  # stopped early (an interrupt): the cells running are stopped
        for receiver, (_, process, _) in running.items():
            process.kill()
            process.join()
            receiver.close()


def _run_timed(cell: Cell, sender, threads: int) -> None:
    """A timed cell's process: its share of the cores, the cell, its row sent back."""
    _start_worker(threads)
    sender.send(run_cell(cell))
    sender.close()


def _check_main(cells) -> bool:
    """Whether the workers must run the main script (a cell refers to something defined
    in it); ConfigError saying what to change when the script starts this grid outside an
    ``if __name__ == "__main__":`` block and the workers would run or import it (a factory
    defined in it, or named as ``"that_script.py:factory"``; a flow or ``extras`` function
    too), starting the grid again."""
    names = main_script.main_names(cells)
    in_file = main_script.main_file_factories([s for c in cells
                                               for s in (c.source, c.flow, c.extras)])
    if not names and not in_file:
        return False
    where = main_script.unguarded_call()
    if where is not None:
        names = list(dict.fromkeys(names + in_file))
        listed = ", ".join(names)
        raise ConfigError(
            f"{listed} {'is' if len(names) == 1 else 'are'} defined in the script being run, "
            f"which each worker process runs again to find {'it' if len(names) == 1 else 'them'}"
            f"; the script starts this grid at its top level ({where}), so each worker would "
            f"start it again: put that call under `if __name__ == \"__main__\":`, or move "
            f"{listed} into a file of {'its' if len(names) == 1 else 'their'} own and name "
            f"the model as \"that_file.py:{names[0]}\"")
    return bool(names)


def import_ray():
    """Ray, imported on first use; ConfigError saying how to install it when it is not."""
    try:
        import ray
    except ImportError:
        raise ConfigError("the Ray executor needs Ray: pip install 'mcu-npu[ray]'") from None
    return ray


def _on_ray(cells, address: str | None, workers: int | None) -> Iterator[tuple[int, Row]]:
    """The cells as Ray tasks (one CPU each) of the cluster at ``address`` ("local" or None:
    one started here, unless this process is already connected to one), gathered with
    ``ray.wait`` as they finish. The nodes need mcu-npu installed, and a model given as
    ``file.py:factory`` at the same path."""
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        options = dict(include_dashboard=False, log_to_driver=False, logging_level="warning")
        if address in (None, "local"):
            options["num_cpus"] = workers or default_workers(len(cells))
            # the workers import mcu-npu and the factories as this process does
            options["runtime_env"] = {"env_vars": {"PYTHONPATH": os.pathsep.join(
                p for p in sys.path if p)}}
        else:
            options["address"] = address
        try:
            ray.init(**options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = "a local Ray instance" if address in (None, "local") else \
                f"the Ray cluster at {address!r}"
            raise ConfigError(f"cannot start or reach {where}: {first_line(exc)}") from exc
    try:
        task = ray.remote(num_cpus=1)(run_cell)
        refs = {task.remote(c): i for i, c in enumerate(cells)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                i = refs[ref]
                try:
                    row = ray.get(ref)
                except Exception as exc:  # noqa: BLE001  (a worker died, a task failed)
                    row = error_row(cells[i], f"the Ray task failed: {type(exc).__name__}: "
                                    f"{first_line(exc)}")
                yield i, row
    finally:
        if started:
            ray.shutdown()
