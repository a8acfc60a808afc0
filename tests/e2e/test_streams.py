"""Models whose state lives between calls, compiled and run as a stream on the three SoC
targets: state in buffers (rings of past frames, recurrent states) kept int8 in the
program's mutable buffers and read and written by the NPU; recurrent cells with their state
as program I/O. Each host run of these slow tests also runs in ExecuTorch's C++ runtime
(``conftest``), which keeps its own state along the same stream: the outputs must be equal
bit for bit, call after call."""

from __future__ import annotations

import copy

import pytest
import torch

import mcu_npu
from mcu_npu.models.streaming import DelayRing, causal_tcn, example_sequence, gru_kws
from mcu_npu.estimate.metrics import sqnr_db
from stream_models import BUFFERED, CellIO, LSTMCellIO, OneStepGRU, carried, frames

TARGETS = ["corstone-300", "corstone-320", "imxrt700"]
STREAM = 48


def _compile(model, calibration, target, **kwargs):
    return mcu_npu.compile(copy.deepcopy(model), calibration[0], target=target,
                           calibration=calibration, progress=False, **kwargs)


def _npu_share(prog) -> float:
    s = prog.report.summary
    return s["ops_on_npu"] / s["ops_total"]


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(BUFFERED))
def test_buffered_state_runs_on_the_npu_as_a_stream(name, target):
    cls, shape = BUFFERED[name]
    torch.manual_seed(0)
    model = cls().eval()
    stream = frames(shape, STREAM)
    with pytest.warns(UserWarning) if target == "imxrt700" else _nothing():
        prog = _compile(model, stream, target)
    # the compute on both sides of the state is on the NPU, the state an int8 buffer
    assert _npu_share(prog) >= 0.9, prog.report
    assert prog.report.state and all(t["dtype"] == "int8" for t in prog.report.state)
    buffers = dict(model.named_buffers())
    assert [t["name"] for t in prog.report.state] == list(buffers)
    assert prog.report.summary["state_bytes"] == sum(b.numel() for b in buffers.values())
    # the numerics contract over the whole stream (the report measures it on the stream)
    acc = prog.report.accuracy
    assert acc["sqnr_db"] >= acc["reference_sqnr_db"] - 1.0, acc
    # the program carries its state: the stream's outputs follow the float model's
    floats, hosts = [], []
    reference = copy.deepcopy(model)
    with torch.no_grad():
        for (x,) in stream:
            floats.append(reference(x))
            hosts.append(prog.run(x)[0])
    assert sqnr_db(torch.cat(floats).flatten(), torch.cat(hosts).flatten()) == \
        pytest.approx(acc["sqnr_db"], abs=0.01)
    # the same frame twice gives two answers, as the float model's
    again = prog.run(stream[-1][0])[0]
    assert not torch.equal(again, hosts[-1])
    # reset_state: the stream starts over
    prog.reset_state()
    assert torch.equal(prog.run(stream[0][0])[0], hosts[0])


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("cls", [CellIO, lambda: CellIO("rnn"), LSTMCellIO, OneStepGRU],
                         ids=["gru_cell", "rnn_cell", "lstm_cell", "gru_one_step"])
def test_state_as_program_io_keeps_one_encoding(cls, target):
    torch.manual_seed(0)
    model = cls().eval()
    frame = (1, 1, 10) if isinstance(model, OneStepGRU) else (1, 10)
    stream = carried(model, frame, STREAM)
    with pytest.warns(UserWarning) if target == "imxrt700" else _nothing():
        prog = _compile(model, stream, target, io="int8")
    assert _npu_share(prog) >= 0.9, prog.report
    acc = prog.report.accuracy
    assert acc["sqnr_db"] >= acc["reference_sqnr_db"] - 1.0, acc
    io = prog.report.summary["io"]
    states = len(stream[0]) - 1
    for k in range(1, states + 1):  # input k and output k are one state, one encoding
        read, written = io["inputs"][k], io["outputs"][k]
        assert (read["scale"], read["zero_point"]) == (written["scale"], written["zero_point"])
    # the firmware passes the int8 state back as it came out
    reference = copy.deepcopy(model)
    state_q = prog.quantize_inputs(*stream[0])[1:]
    state_f = stream[0][1:]
    floats, hosts = [], []
    with torch.no_grad():
        for x, *_ in stream:
            out = prog.run(prog.quantize_inputs(x, *state_f)[0], *state_q)
            state_q = out[1:]
            hosts.append(prog.dequantize_outputs(out)[0])
            y, *state_f = reference(x, *state_f)
            floats.append(y)
    assert sqnr_db(torch.cat(floats).flatten(), torch.cat(hosts).flatten()) >= \
        acc["reference_sqnr_db"] - 6.0


@pytest.mark.slow
def test_state_does_not_drift_over_a_long_stream():
    """A value round the loop is read in the encoding it was written in, so it is never
    requantized: after 4,000 calls a delay ring still returns each frame exactly as it went
    in ``length`` calls before (frames on the state's int8 grid, so nothing is rounded on
    the way in)."""
    torch.manual_seed(0)
    model, length = DelayRing().eval(), 4
    prog = _compile(model, frames((1, 8, 1), 64, seed=3), "corstone-300")
    (state,) = prog.report.state
    assert state["dtype"] == "int8"
    scale, zero_point = state["scale"], state["zero_point"]
    g = torch.Generator().manual_seed(4)
    stream = [((torch.randint(-128, 128, (1, 8, 1), generator=g).double() - zero_point)
               * scale) for _ in range(4000)]
    run = prog._runtime().run  # the host runtime alone: the long stream is about the state
    for t, x in enumerate(stream):
        out = run(x.float())[0]
        if t >= length:  # float32 of the same grid value: far below a step
            assert torch.allclose(out.double(), stream[t - length], rtol=0, atol=1e-6), t


def test_saved_program_keeps_and_resets_its_state(tmp_path):
    torch.manual_seed(0)
    cls, shape = BUFFERED["ring_conv"]
    model = cls().eval()
    stream = frames(shape, 16)
    prog = _compile(model, stream, "corstone-300")
    prog.save(tmp_path / "ring.pte")
    loaded = mcu_npu.load(tmp_path / "ring.pte")
    first = [loaded.run(x)[0] for (x,) in stream[:4]]
    assert not torch.equal(loaded.run(stream[0][0])[0], first[0])
    loaded.reset_state()
    assert all(torch.equal(loaded.run(x)[0], y) for (x,), y in zip(stream[:4], first))
    assert loaded.report.state == prog.report.state


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("make", [lambda: causal_tcn(channels=8), lambda: gru_kws(channels=8,
                                                                               hidden=16)],
                         ids=["causal_tcn", "gru_kws"])
def test_a_sequence_model_runs_as_its_stream(make, target):
    """``mcu_npu.streaming`` of a causal sequence model, compiled: at every frame the
    program's output is the sequence model's on the frames so far, within the contract."""
    model = make()
    (sequence,) = example_sequence(frames=STREAM, seed=2)
    stream = mcu_npu.streaming(model, (sequence,))
    calls = [(f,) for f in stream.frames(sequence)]
    stream.reset_state()
    with pytest.warns(UserWarning) if target == "imxrt700" else _nothing():
        prog = _compile(stream, calls, target)
    assert _npu_share(prog) >= 0.9, prog.report
    acc = prog.report.accuracy
    assert acc["sqnr_db"] >= acc["reference_sqnr_db"] - 1.0, acc
    with torch.no_grad():
        want = [model(sequence[..., :t + 1]) for t in range(len(calls))]
    got = [prog.run(*call)[0] for call in calls]
    # the report measured the program against the float stream; the float stream is the
    # sequence model frame by frame, so the same figure holds against the sequence model
    assert sqnr_db(torch.cat(want).flatten(), torch.cat(got).flatten()) == \
        pytest.approx(acc["sqnr_db"], abs=0.05)


def test_the_report_gives_a_streams_cost_against_its_frame_period():
    torch.manual_seed(0)
    cls, shape = BUFFERED["ring_conv"]
    model = cls().eval()
    stream = frames(shape, 16)
    prog = _compile(model, stream, "corstone-300", frame_period_ms=10)
    budget = prog.report.stream
    assert budget["per_call_us"] == prog.report.latency["latency_us"]
    assert budget["state_bytes"] == 16 and budget["frame_period_ms"] == 10.0
    assert budget["margin_us"] == pytest.approx(10_000 - budget["per_call_us"], abs=1e-3)
    assert budget["real_time"] and prog.report.summary["realtime_margin_us"] == \
        budget["margin_us"]
    text = str(prog.report)
    assert "state 16 B kept between calls; at one call every 10 ms a call fits" in text
    assert any(line.split()[:5] == ["ring", "(1,", "8,", "2)", "int8"] for line in text.splitlines())
    assert 'id="state"' in prog.report.to_html()
    grid = mcu_npu.compare(model, stream[0], targets=["corstone-300"], calibration=stream,
                           frame_period_ms=10, progress=False)
    (row,) = grid.rows
    assert row.state_bytes == 16 and row.realtime_margin_us == budget["margin_us"]
    assert "rt margin us" in str(grid) and "state B" in str(grid)


@pytest.mark.parametrize("period", [0, -5, float("inf"), "10", True])
def test_a_frame_period_must_be_a_positive_number(period):
    cls, shape = BUFFERED["ring_conv"]
    with pytest.raises(mcu_npu.ConfigError, match="frame_period_ms must be a positive"):
        mcu_npu.compile(cls().eval(), frames(shape, 1)[0], target="corstone-300",
                        frame_period_ms=period, progress=False)
