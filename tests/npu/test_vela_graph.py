"""own_concat_inputs: a concatenation input read elsewhere too gets a MAXIMUM(x, x) copy of
its own; the graph computes the same bytes, and it is the graph Vela compiles and the host runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import convert_module

from mcu_npu.npu.ethos_u.vela import VelaCompiler
from mcu_npu.npu.ethos_u.vela_graph import own_concat_inputs
from mcu_npu.device.payload import unpack_reference
from mcu_npu.runtime.litert import run_model
from mcu_npu.targets import get_target
from mcu_npu.tflite.describe import load_model, op_names

pytest.importorskip("ethosu.vela")


class SharedConcat(torch.nn.Module):
    """``y`` feeds a convolution and the concatenation; ``z`` feeds it and is an output."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 5, 3, padding=1)
        self.b = torch.nn.Conv2d(5, 7, 1)
        self.c = torch.nn.Conv2d(12, 4, 1)

    def forward(self, x):
        y = torch.relu(self.a(x))
        z = self.b(y)
        return self.c(torch.cat([y, z], 1)), z


class OwnConcat(torch.nn.Module):
    """Every concatenation input has the concatenation as its only reader."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 5, 1)
        self.b = torch.nn.Conv2d(3, 7, 1)

    def forward(self, x):
        return torch.cat([self.a(x), self.b(x)], 1)


def _converted(module):
    torch.manual_seed(0)
    x = torch.randn(1, 3, 8, 6)
    return convert_module(module.eval(), (x,))[1], x


def _concat_inputs(buffer):
    tfl = load_model(buffer)
    graph = tfl.subgraphs[0]
    names = op_names(buffer)
    (cat,) = [op for op, name in zip(graph.operators, names) if name == "CONCATENATION"]
    producers = {int(t): (name, [int(s) for s in op.inputs])
                 for op, name in zip(graph.operators, names) for t in op.outputs}
    return [producers[int(t)] for t in cat.inputs]


def test_shared_inputs_get_a_maximum_copy_and_the_same_bytes():
    model, x = _converted(SharedConcat())
    rewritten = own_concat_inputs(model)
    assert "MAXIMUM" not in op_names(model.buffer)
    for name, ins in _concat_inputs(rewritten.buffer):
        assert name == "MAXIMUM" and len(set(ins)) == 1  # a copy: one tensor read twice
    assert op_names(rewritten.buffer).count("MAXIMUM") == 2
    assert len(rewritten.op_origins) == len(op_names(rewritten.buffer))
    assert rewritten.inputs == model.inputs and rewritten.outputs == model.outputs
    for got, expected in zip(run_model(rewritten, (x,)), run_model(model, (x,))):
        np.testing.assert_array_equal(got, expected)


def test_graph_without_shared_inputs_is_left_as_it_is():
    model, _ = _converted(OwnConcat())
    assert own_concat_inputs(model) is model


def test_vela_compiles_and_the_host_keeps_the_rewritten_graph():
    model, x = _converted(SharedConcat())
    artifact = VelaCompiler().compile(model, get_target("ethos-u55-128"))
    host, _ = unpack_reference(artifact.host_graph)
    assert op_names(host.buffer).count("MAXIMUM") == 2
    for got, expected in zip(run_model(host, (x,)), run_model(model, (x,))):
        np.testing.assert_array_equal(got, expected)
