"""Sequence model -> stream (``mcu_npu.streaming``): at every frame t the stream's output
equals the sequence model's on frames 1..t (float, 1e-5 of the output's scale), state is
registered buffers updated in place, non-causal layers are refused by name."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mcu_npu.errors import ConfigError, UnsupportedModelError
from mcu_npu.models.streaming import causal_tcn, example_sequence, gru_kws
from mcu_npu import streaming

FRAMES = 36


def _assert_stream_equals_prefixes(model, stream, sequence, time_dim=-1):
    """Frame by frame, the stream's output is the model's on the frames so far (its last
    frame, for an output over time)."""
    with torch.no_grad():
        scale = float(model(sequence).abs().max())
        for t, frame in enumerate(sequence.split(1, dim=time_dim), 1):
            got = stream(frame)
            want = model(sequence.narrow(time_dim, 0, t))
            if want.shape != got.shape:
                want = want.narrow(time_dim, -1, 1)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * scale,
                                       msg=lambda m: f"frame {t}: {m}")


class MeanPoolLSTM(nn.Module):
    """batch_first LSTM, a chomped conv over its outputs, mean over time and the last
    hidden state into a linear head."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(12, 20, batch_first=True)
        self.conv = nn.Conv1d(20, 16, 3, padding=2)
        self.head = nn.Linear(16 + 20, 5)

    def forward(self, x):  # (N, T, 12)
        out, (h, _) = self.lstm(x)
        y = torch.relu(self.conv(out.transpose(1, 2))[..., :-2])
        return self.head(torch.cat([y.mean(dim=-1), h[-1]], dim=-1))


@pytest.fixture(scope="module", params=["causal_tcn", "gru_kws"])
def converted(request):
    model = {"causal_tcn": causal_tcn, "gru_kws": gru_kws}[request.param]()
    (sequence,) = example_sequence(frames=FRAMES, seed=1)
    return model, streaming(model, (sequence,)), sequence


def test_stream_equals_the_sequence_model_at_every_frame(converted):
    model, stream, sequence = converted
    stream.reset_state()
    _assert_stream_equals_prefixes(model, stream, sequence)


def test_reset_state_starts_the_sequence_again(converted):
    model, stream, sequence = converted
    stream.reset_state()
    first = stream(sequence[..., :1])
    for frame in sequence[..., 1:5].split(1, dim=-1):
        stream(frame)
    assert not torch.allclose(stream(sequence[..., 5:6]), first)
    stream.reset_state()
    torch.testing.assert_close(stream(sequence[..., :1]), first, rtol=0, atol=0)


def test_stream_exports_with_its_state_as_buffer_mutations(converted):
    model, stream, sequence = converted
    stream.reset_state()
    ep = torch.export.export(stream, (stream.example_frame,))
    mutated = ep.run_decompositions({}).graph_signature.buffers_to_mutate
    assert mutated and all("stream_state" in b for b in mutated.values())
    exported = ep.module()
    with torch.no_grad():
        for frame in sequence.split(1, dim=-1):
            got = exported(frame)
        torch.testing.assert_close(got, model(sequence), rtol=1e-5, atol=1e-5)


def test_lstm_running_mean_and_last_hidden_state():
    torch.manual_seed(3)
    model = MeanPoolLSTM().eval()
    sequence = torch.randn(2, FRAMES, 12)
    stream = streaming(model, (sequence,), time_dim=1)
    kinds = sorted(type(m).__name__ for m in stream.modules()
                   if "stream_state" in type(m).__module__ or hasattr(m, "reset"))
    assert kinds == ["FrameRing", "RecurrentState", "RunningStatistic"]
    _assert_stream_equals_prefixes(model, stream, sequence, time_dim=1)


class _Conv(nn.Module):
    def __init__(self, pad=1, stride=1, chomp=0):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=pad, stride=stride)
        self.chomp = chomp

    def forward(self, x):
        y = self.conv(x)
        return y[..., :-self.chomp] if self.chomp else y


class _BiGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 8, batch_first=True, bidirectional=True)

    def forward(self, x):
        return self.gru(x)[0][:, -1]


class _FirstFrame(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 1)

    def forward(self, x):
        return self.conv(x)[..., 0]


class _Renormalised(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3)

    def forward(self, x):
        return self.conv(F.pad(x - x.mean(-1, keepdim=True), (2, 0)))[..., -1]


@pytest.mark.parametrize("model, time_dim, match", [
    (_Conv(pad=1), -1, r"layer 'conv'.*looks 1 frame\(s\) ahead.*Pad 2 frames on the left"),
    (_Conv(pad=2), -1, r"layer 'conv'.*2 frame\(s\) past the last one"),
    (_Conv(pad=2, stride=2, chomp=2), -1, r"layer 'conv'.*stride 2"),
    (_BiGRU(), 1, r"layer 'gru'.*bidirectional"),
    (_FirstFrame(), -1, r"picks a frame other than the last"),
    (_Renormalised(), -1, r"layer 'conv'.*past frames of a tensor that depends on a statistic"),
])
def test_non_causal_layers_are_refused_by_name(model, time_dim, match):
    shape = (1, 20, 4) if time_dim == 1 else (1, 4, 20)
    with pytest.raises(UnsupportedModelError, match=match):
        streaming(model.eval(), (torch.randn(shape),), time_dim=time_dim)


def test_left_padding_with_a_value_starts_the_ring_with_it():
    model = nn.Sequential(nn.ConstantPad1d((2, 0), 0.5), nn.Conv1d(3, 4, 3, dilation=1),
                          nn.Tanh(), nn.ConstantPad1d((4, 0), -1.0),
                          nn.Conv1d(4, 2, 3, dilation=2)).eval()
    sequence = torch.randn(1, 3, FRAMES)
    stream = streaming(model, (sequence,))
    _assert_stream_equals_prefixes(model, stream, sequence)


def test_a_time_axis_that_is_not_an_axis_is_a_config_error():
    with pytest.raises(ConfigError, match="time_dim=3"):
        streaming(causal_tcn(), example_sequence(), time_dim=3)


class _OtherSpellings(nn.Module):
    """Chomp by ``narrow``, ``nn.AdaptiveAvgPool1d(1)``, ``amax`` over time, and an output
    over time next to the pooled ones."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, dilation=2, padding=4)
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        y = torch.tanh(self.conv(x).narrow(2, 0, x.shape[2]))
        return self.head(self.pool(y).flatten(1)), y.amax(-1), y


def test_other_spellings_of_chomp_and_pooling():
    torch.manual_seed(4)
    model = _OtherSpellings().eval()
    sequence = torch.randn(1, 4, FRAMES)
    stream = streaming(model, (sequence,))
    with torch.no_grad():
        for t, frame in enumerate(sequence.split(1, dim=-1), 1):
            pooled, peak, y = stream(frame)
            want = model(sequence[..., :t])
            torch.testing.assert_close((pooled, peak, y), (want[0], want[1], want[2][..., -1:]),
                                       rtol=1e-5, atol=1e-6)
