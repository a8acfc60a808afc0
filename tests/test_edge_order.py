"""The Edge pass order of ``passes.edge.order`` is the order a compile runs them in, and each
stage names the function that runs it.

Two compiles on a target with an NPU and Cortex-M kernels run every stage between them: one
with a uint8 input as the sensor gives it and int8 program I/O, one of a model keeping state
in a buffer. The calls of each stage's passes (and of the delegation, which has none) are
recorded in order.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

import mcu_npu
import mcu_npu.flow.lower as flow_lower
from mcu_npu.passes.edge import order
from mcu_npu.passes.edge.order import EDGE_STAGES


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 4, 3, padding=1), nn.Linear(4 * 8 * 8, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


class _Running(nn.Module):
    """A linear layer's output added to the previous call's, kept in a buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("h", torch.zeros(1, 8))
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = torch.tanh(self.fc(x) + self.h)
        self.h.copy_(y)
        return y


def _uint8_input_int8_io():
    g = torch.Generator().manual_seed(0)
    data = [(torch.randint(0, 256, (1, 3, 8, 8), generator=g, dtype=torch.uint8),)
            for _ in range(4)]
    mcu_npu.compile(_Net().eval(), data[0], target="corstone-300", calibration=data,
                    inputs=mcu_npu.InputSpec(dtype="uint8"), io="int8")
    return set(EDGE_STAGES) - {order.STATE}


def _state():
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(1, 8, generator=g),) for _ in range(4)]
    mcu_npu.compile(_Running().eval(), data[0], target="corstone-300", calibration=data)
    return {order.REFRESH_STRIDES, order.DELEGATION, order.CORTEX_M_LOWERING,
            order.PORTABLE_LINEAR, order.STATE, order.SPLIT_OUTPUTS}


def test_each_stage_names_the_function_that_runs_it():
    for stage in EDGE_STAGES:
        module, _, path = stage.runs_in.partition(".")
        found = importlib.import_module(f"mcu_npu.{module}.{path.split('.')[0]}")
        for name in path.split(".")[1:]:
            found = getattr(found, name)
        assert callable(found), stage.runs_in
        assert stage.why


@pytest.mark.parametrize("compile_", [_uint8_input_int8_io, _state])
def test_a_compile_runs_the_stages_in_the_listed_order(monkeypatch, compile_):
    ran = []

    def recorded(stage, original):
        def call(*args, **kwargs):
            ran.append(stage)
            return original(*args, **kwargs)
        return call

    for stage in EDGE_STAGES:
        for cls in stage.passes:
            monkeypatch.setattr(cls, "call", recorded(stage, cls.call))
    monkeypatch.setattr(flow_lower, "keep_interfaces_only",
                        recorded(order.DELEGATION, flow_lower.keep_interfaces_only))
    torch.manual_seed(0)
    expected = compile_()

    positions = [EDGE_STAGES.index(s) for s in ran]
    assert positions == sorted(positions), [s.runs_in for s in ran]
    assert set(ran) == expected
