"""One compile of DS-CNN per target, with its ETRecord, shared by the model-level tests of
this directory (compiles are the expensive part); and one host run of it writing an ETDump."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import mcu_npu
from mcu_npu.models import ds_cnn

TARGETS = ["corstone-300", "imxrt700"]
ONE_COMPILE_PER_TARGET = pytest.mark.xdist_group("devtools-ds_cnn")


@dataclass
class Compiled:
    target: str
    prog: object
    pte: Path
    etrecord: Path
    etdump: Path
    debug_buffer: Path
    inputs: tuple


@pytest.fixture(scope="session", params=TARGETS)
def ds_cnn_debug(request, tmp_path_factory) -> Compiled:
    model, inputs = ds_cnn()[:2]
    out = tmp_path_factory.mktemp(f"devtools-{request.param}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # host-only payloads: covered elsewhere
        prog = mcu_npu.compile(model, inputs, request.param, calibration=[inputs],
                               etrecord=out / "ds_cnn.etrecord")
    pte = prog.save(out / "ds_cnn.pte")
    prog.run(*inputs, etdump=out / "ds_cnn.etdp", debug_buffer=out / "ds_cnn.debug.bin")
    return Compiled(request.param, prog, pte, out / "ds_cnn.etrecord", out / "ds_cnn.etdp",
                    out / "ds_cnn.debug.bin", tuple(inputs))


def samples(n: int, shape=(1, 1, 49, 10)) -> list[torch.Tensor]:
    return [torch.randn(shape, generator=torch.Generator().manual_seed(100 + k))
            for k in range(n)]
