import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import mcu_npu.nn as qnn
from mcu_npu.passes import ProjSizeNotSupportedError

PAIRS = {
    "gru": (nn.GRU, qnn.GRU, {}),
    "rnn_tanh": (nn.RNN, qnn.RNN, {"nonlinearity": "tanh"}),
    "rnn_relu": (nn.RNN, qnn.RNN, {"nonlinearity": "relu"}),
    "lstm": (nn.LSTM, qnn.LSTM, {}),
}
CELLS = {
    "gru": (nn.GRUCell, qnn.GRUCell, {}),
    "rnn_tanh": (nn.RNNCell, qnn.RNNCell, {"nonlinearity": "tanh"}),
    "rnn_relu": (nn.RNNCell, qnn.RNNCell, {"nonlinearity": "relu"}),
    "lstm": (nn.LSTMCell, qnn.LSTMCell, {}),
}


def assert_same(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


def state(kind, shape, g):
    h = torch.randn(*shape, generator=g)
    return (h, torch.randn(*shape, generator=g)) if kind == "lstm" else h


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(PAIRS)), input_size=st.integers(1, 12), hidden_size=st.integers(1, 16),
    num_layers=st.integers(1, 3), bidirectional=st.booleans(), bias=st.booleans(), batch_first=st.booleans(),
    seq_len=st.integers(1, 16), batch=st.integers(0, 3), with_state=st.booleans(),
)
def test_from_float_equals_torch(kind, input_size, hidden_size, num_layers, bidirectional, bias, batch_first,
                                 seq_len, batch, with_state):
    """``batch == 0`` stands for an unbatched input."""
    float_cls, q_cls, extra = PAIRS[kind]
    torch.manual_seed(0)
    ref = float_cls(input_size, hidden_size, num_layers=num_layers, bias=bias, batch_first=batch_first,
                    bidirectional=bidirectional, **extra).eval()
    module = q_cls.from_float(ref)
    g = torch.Generator().manual_seed(1)
    layers = num_layers * (2 if bidirectional else 1)
    if batch == 0:
        x, h_shape = torch.randn(seq_len, input_size, generator=g), (layers, hidden_size)
    else:
        x_shape = (batch, seq_len) if batch_first else (seq_len, batch)
        x, h_shape = torch.randn(*x_shape, input_size, generator=g), (layers, batch, hidden_size)
    args = (x, state(kind, h_shape, g)) if with_state else (x,)
    with torch.no_grad():
        assert_same(module(*args), ref(*args))


@pytest.mark.parametrize("kind", sorted(CELLS))
@pytest.mark.parametrize("batch", [0, 3])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("with_state", [True, False])
def test_cell_from_float_equals_torch(kind, batch, bias, with_state):
    float_cls, q_cls, extra = CELLS[kind]
    torch.manual_seed(0)
    ref = float_cls(5, 7, bias=bias, **extra)
    cell = q_cls.from_float(ref)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*((batch,) if batch else ()), 5, generator=g)
    args = (x, state(kind, (*((batch,) if batch else ()), 7), g)) if with_state else (x,)
    with torch.no_grad():
        assert_same(cell(*args), ref(*args))


def test_from_float_rejects_other_modules():
    with pytest.raises(TypeError):
        qnn.GRU.from_float(nn.LSTM(3, 4))


def test_lstm_proj_size_is_rejected_clearly():
    with pytest.raises(ProjSizeNotSupportedError, match="proj_size"):
        qnn.LSTM.from_float(nn.LSTM(3, 4, proj_size=2))


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_prepare_qat_then_train_step(kind):
    float_cls, q_cls, extra = PAIRS[kind]
    model = q_cls.from_float(float_cls(4, 6, num_layers=2, bidirectional=True, **extra)).train()
    model.qconfig = torch.ao.quantization.get_default_qat_qconfig("qnnpack")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = torch.ao.quantization.prepare_qat(model)
    assert isinstance(prepared.cells[0].ih, torch.ao.nn.qat.Linear)
    assert hasattr(prepared.cells[0].hh, "weight_fake_quant")
    output, _ = prepared(torch.randn(5, 2, 4))
    output.square().mean().backward()
    grad = prepared.cells[0].ih.weight.grad
    assert grad is not None and torch.isfinite(grad).all()
    assert float(prepared.cat_states[0].activation_post_process.activation_post_process.max_val) > 0


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_torch_export(kind):
    float_cls, q_cls, extra = PAIRS[kind]
    module = q_cls.from_float(float_cls(4, 6, num_layers=2, bidirectional=True, batch_first=True, **extra).eval())
    x = torch.randn(2, 5, 4)
    ep = torch.export.export(module, (x,))
    linears = [n for n in ep.graph.nodes if n.target == torch.ops.aten.linear.default]
    assert len(linears) == 2 * 2 * (5 + 1)
    with torch.no_grad():
        assert_same(ep.module()(x), module(x))
