"""LiftState: buffers written in place become inputs and outputs, exactly."""

import copy

import torch
from torch import nn

from mcu_npu.flow.export import export_module
from mcu_npu.passes.aten.lift_state import LiftState
from stream_models import BUFFERED, frames


def _lifted(model, frame):
    graph = export_module(copy.deepcopy(model), frame)
    lift = LiftState()
    result = lift(graph)
    return result.graph_module, lift.state, result.modified


def test_each_buffered_model_lifts_to_the_same_stream():
    for name, (cls, shape) in BUFFERED.items():
        torch.manual_seed(0)
        model = cls().eval()
        stream = frames(shape, 12)
        graph, state, modified = _lifted(model, stream[0])
        assert modified
        assert [t.name for t in state.tensors] == [n for n, _ in model.named_buffers()]
        assert not any(n.target is torch.ops.aten.copy_.default for n in graph.graph.nodes)
        step = state.stepper(graph)
        with torch.no_grad():
            for (x,) in stream:  # the same floats: the rewrite moves no arithmetic
                assert torch.equal(step(x)[0], model(x)), name


def test_a_read_after_the_write_reads_the_written_value():
    class WriteThenRead(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", torch.zeros(1, 4))

        def forward(self, x):
            self.total.add_(x)
            return self.total * 2

    model = WriteThenRead()
    stream = frames((1, 4), 5)
    graph, state, _ = _lifted(model, stream[0])
    step = state.stepper(graph)
    for (x,) in stream:
        assert torch.equal(step(x)[0], model(x))


def test_a_model_without_state_is_left_as_it_is():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    graph, state, modified = _lifted(model, (torch.randn(1, 4),))
    assert not modified and not state


def test_state_initial_values_are_the_buffers():
    cls, shape = BUFFERED["ring_conv"]
    model = cls().eval()
    model.ring.fill_(0.25)
    _, state, _ = _lifted(model, frames(shape, 1)[0])
    (ring,) = state.tensors
    assert torch.equal(ring.initial, torch.full((1, 8, 2), 0.25))
    assert ring.nbytes == 16 * 4
