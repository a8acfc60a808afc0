"""Benchmark: streaming models, one call per frame with their state kept in the program,
beside the sequence form of the same model.

Run::

    python benchmarks/streaming.py [--frames 1000] [--targets corstone-300,corstone-320,imxrt700]

For a GRU keyword spotter (10 features, a 2-layer GRU of 32) and a depthwise-separable
temporal conv wake-word detector of MLPerf Tiny's streaming shape (40 log-mel features per
frame, 64 channels, 4 dilated blocks, the mean over time), both from
``mcu_npu.models.streaming``, turned into their streams by ``mcu_npu.streaming`` and
compiled per target (calibrated on the first 64 frames of the stream), it prints:

* stream: ops on the NPU, partitions, estimated time of one call, the state kept between
  calls (bytes), and the SQNR against the float sequence model over every output of a
  ``--frames`` stream (the stream's output at frame t against the sequence model's on
  frames 1..t: one evaluation of the sequence model per frame, on the prefix);
* sequence: the sequence model compiled on a 49-frame window (ops on the NPU, partitions,
  time of one window, its SQNR over 8 windows), what a non-streaming deployment runs each
  time it decides.

``--drift N`` runs the GRU keyword spotter's stream for N calls on corstone-300 (host runtime)
and prints its SQNR against the float sequence model per 1,000-call window, and a delay
ring's count of frames that come out, after four trips round the ring's loop, as exactly the
int8 value that went in: a state requantized on its way round would drift.

Random weights and inputs (N(0, 1) features): the figures show fidelity and cost, not
accuracy on speech. Latencies are the compiler's estimates (Vela's cycles on Ethos-U, MACs
at the peak for Neutron), not measurements.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings

import torch

import mcu_npu
from mcu_npu.models.streaming import DelayRing, ds_cnn_stream, example_sequence, gru_kws
from mcu_npu.estimate.metrics import sqnr_db

MODELS = {"gru_kws": (gru_kws, 10), "ds_cnn_stream": (ds_cnn_stream, 40)}
WINDOW = 49
CALIBRATION = 64


def stream_row(model, features: int, target: str, frames: int) -> dict:
    (sequence,) = example_sequence(features=features, frames=frames, seed=1)
    stream = mcu_npu.streaming(model, (sequence[..., :WINDOW],))
    calls = [(f,) for f in stream.frames(sequence)]
    stream.reset_state()
    start = time.process_time()
    prog = mcu_npu.compile(copy.deepcopy(stream), calls[0], target=target,
                           calibration=calls[:CALIBRATION], progress=False)
    seconds = time.process_time() - start
    outs, want = [], []
    with torch.no_grad():
        for t, call in enumerate(calls):
            outs.append(prog.run(*call)[0])
            want.append(model(sequence[..., :t + 1]))
    s = prog.report.summary
    return {"ops": f"{s['ops_on_npu']}/{s['ops_total']}", "parts": s["partitions"],
            "us": s.get("latency_us"), "state": s.get("state_bytes", 0),
            "sqnr": sqnr_db(torch.cat(want).flatten(), torch.cat(outs).flatten()),
            "cpu_s": seconds}


def sequence_row(model, features: int, target: str) -> dict:
    windows = [example_sequence(features=features, frames=WINDOW, seed=s) for s in range(16)]
    prog = mcu_npu.compile(copy.deepcopy(model), windows[0], target=target,
                           calibration=windows, progress=False)
    s = prog.report.summary
    return {"ops": f"{s['ops_on_npu']}/{s['ops_total']}", "parts": s["partitions"],
            "us": s.get("latency_us"), "sqnr": s.get("sqnr_db")}


def drift(calls: int) -> None:
    """The state over a long stream: windowed SQNR of a GRU stream, exactness of a ring."""
    model = gru_kws()
    (sequence,) = example_sequence(features=10, frames=calls, seed=5)
    stream = mcu_npu.streaming(model, (sequence[..., :WINDOW],))
    frames = [(f,) for f in stream.frames(sequence)]
    stream.reset_state()
    prog = mcu_npu.compile(copy.deepcopy(stream), frames[0], target="corstone-300",
                           calibration=frames[:CALIBRATION], progress=False)
    run = prog._runtime().run
    floats, hosts = [], []
    with torch.no_grad():
        for f in frames:
            floats.append(stream(*f))
            hosts.append(run(*f)[0])
    window = 1000
    figures = [sqnr_db(torch.cat(floats[a:a + window]).flatten(),
                       torch.cat(hosts[a:a + window]).flatten())
               for a in range(0, calls - window + 1, window)]
    print(f"GRU stream, {calls:,} calls, SQNR per {window:,}-call window (dB): "
          + " ".join(f"{x:.2f}" for x in figures))
    ring = DelayRing(channels=10)
    prog = mcu_npu.compile(ring, frames[0], target="corstone-300",
                           calibration=frames[:CALIBRATION], progress=False)
    (state,) = prog.report.state
    scale, zero_point = state["scale"], state["zero_point"]
    g = torch.Generator().manual_seed(6)  # frames on the int8 grid: no rounding on the way in
    grid = [(torch.randint(-128, 128, (1, 10, 1), generator=g).double() - zero_point) * scale
            for _ in range(calls)]
    run, exact = prog._runtime().run, 0
    for t, x in enumerate(grid):
        out = run(x.float())[0]
        if t >= 4:
            exact += bool(torch.allclose(out.double(), grid[t - 4], rtol=0, atol=1e-6))
    print(f"delay ring ({state['dtype']} state, 4 frames): {exact:,} of {calls - 4:,} frames "
          f"came out as the int8 value that went in")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--targets", default="corstone-300,corstone-320,imxrt700")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--drift", type=int, metavar="N",
                        help="instead: the state over an N-call stream")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.drift:
        drift(args.drift)
        return 0
    head = (f"{'model':<14} {'target':<13} | {'stream ops':>10} {'parts':>5} {'us/call':>8} "
            f"{'state B':>7} {'SQNR dB':>7} {'CPU s':>6} | {'seq ops':>9} {'parts':>5} "
            f"{'us/window':>9} {'SQNR dB':>7}")
    print(f"stream: {args.frames} frames, calibrated on the first {CALIBRATION}; "
          f"sequence: {WINDOW}-frame windows")
    print(head)
    print("-" * len(head))
    for name in args.models.split(","):
        make, features = MODELS[name]
        model = make()
        for target in args.targets.split(","):
            s = stream_row(model, features, target, args.frames)
            q = sequence_row(model, features, target)
            print(f"{name:<14} {target:<13} | {s['ops']:>10} {s['parts']:>5} {s['us']:>8.1f} "
                  f"{s['state']:>7,} {s['sqnr']:>7.2f} {s['cpu_s']:>6.1f} | {q['ops']:>9} "
                  f"{q['parts']:>5} {q['us']:>9.1f} {q['sqnr']:>7.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
