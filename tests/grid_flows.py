"""Compile flows and an ``extras`` function for the grid's flow tests
(``tests/test_grid_flows.py``), named as ``"grid_flows.py:function"``: a flow other than
``mcu_npu.compile`` that makes a stand-in ``.pte`` in a moment, one that fails, and the
figures read from any flow's ``.pte``."""

from __future__ import annotations


def tiny_flow(model, example_inputs, calibration, target, options):
    """A stand-in program (identifier ``TINY``) naming the target, the calibration samples
    and the options it was given; the figures a row takes, and one extra."""
    pte = b"\0\0\0\0TINY" + f"{target} {len(calibration)} {sorted(options)}".encode()
    return {"pte": pte, "ops_on_npu": 1, "ops_total": 2,
            "extra": {"calibration": len(calibration)}}


def failing_flow(model, example_inputs, calibration, target, options):
    """A flow that cannot compile: its row carries the error."""
    raise RuntimeError("this flow cannot compile the model")


def exiting_flow(model, example_inputs, calibration, target, options):
    """A flow whose tool ends with ``sys.exit`` (as a command line's argument parser does)."""
    import sys

    sys.exit("vela: error: unrecognized arguments")


def pte_figures(pte: bytes) -> dict:
    """The size of the ``.pte`` as read here and its file identifier (bytes 4 to 8)."""
    return {"pte B": len(pte), "identifier": pte[4:8].decode(errors="replace")}
