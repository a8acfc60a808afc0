"""``flow.collector.earlier_objects_frozen``: the objects alive when a compile starts are out
of the collector's passes during it and back in them after it; a process's own freeze or
disabled collector is left alone; the programs are the same."""

from __future__ import annotations

import gc
import threading
from contextlib import nullcontext

import pytest
import torch

from mcu_npu.flow.collector import earlier_objects_frozen

from helpers import assert_same_program


@pytest.fixture
def unfrozen():
    """The test starts with nothing frozen and leaves the process as it found it."""
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    yield
    if frozen:
        gc.freeze()


class _Cycle:
    def __init__(self):
        self.me = self


def test_objects_alive_before_the_block_are_frozen_within_it(unfrozen):
    before = _Cycle()
    with earlier_objects_frozen():
        assert gc.get_freeze_count() > 0
        inside = _Cycle()
        assert not any(o is before for o in gc.get_objects())  # frozen: not tracked there
        assert any(o is inside for o in gc.get_objects())
    assert gc.get_freeze_count() == 0
    assert any(o is before for o in gc.get_objects())


def test_garbage_from_before_the_block_is_collected_after_it(unfrozen):
    import weakref

    dead = _Cycle()
    ref = weakref.ref(dead)
    with earlier_objects_frozen():
        del dead
        gc.collect()
        assert ref() is not None  # frozen, so not collected yet
    gc.collect()
    assert ref() is None


def test_nested_blocks_unfreeze_once_at_the_outermost_exit(unfrozen):
    with earlier_objects_frozen():
        with earlier_objects_frozen():
            pass
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_concurrent_blocks_unfreeze_when_the_last_one_leaves(unfrozen):
    entered, leave = threading.Event(), threading.Event()

    def other():
        with earlier_objects_frozen():
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    with earlier_objects_frozen():
        thread.start()
        entered.wait(10)
    assert gc.get_freeze_count() > 0  # the other block is still inside
    leave.set()
    thread.join(10)
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_itself_keeps_them_frozen(unfrozen):
    """Its objects stay out of the collector's generations after the block. (The freeze
    count itself may fall: a frozen object whose last reference goes is freed.)"""
    kept = _Cycle()
    gc.freeze()
    with earlier_objects_frozen():
        pass
    assert gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects())  # still frozen
    gc.unfreeze()
    assert any(o is kept for o in gc.get_objects())


def test_a_disabled_collector_is_left_as_it_is(unfrozen):
    gc.disable()
    try:
        with earlier_objects_frozen():
            assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_a_compile_gives_the_same_program_with_and_without_the_freeze(monkeypatch, unfrozen):
    import mcu_npu
    from mcu_npu.flow import run

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(64, 3)).eval()
    g = torch.Generator().manual_seed(1)
    cal = [(torch.randn(1, 3, 6, 6, generator=g),) for _ in range(8)]

    def compiled():  # the linear on the Cortex-M kernels, the rest on the NPU
        return mcu_npu.compile(model, cal[0], target="corstone-320", calibration=cal,
                               operators_not_to_delegate=["linear"])

    frozen = compiled()
    assert gc.get_freeze_count() == 0
    monkeypatch.setattr(run, "earlier_objects_frozen", nullcontext)
    plain = compiled()
    assert_same_program(frozen, plain, cal, "frozen", "not frozen")
