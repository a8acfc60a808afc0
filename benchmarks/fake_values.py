"""Benchmark: CPU seconds of the fake value propagation ``export_in_place`` runs, whole
(every call dispatched through fake tensors) against ``graph.fake_values.propagate`` (a
repeated call of a fresh-tensor op made from its first value).

Run::

    PYTHONPATH=src python benchmarks/fake_values.py [--repeat 6]

It compiles a GRU keyword spotter (2 GRU layers of 64 units over 49 frames of 40 features,
unrolled by the compile) for corstone-300, keeps the graph and inputs ``export_in_place``
propagated, and then runs both propagations on them alternately, each in a fresh
FakeTensorMode, printing process CPU seconds (least and median of ``--repeat``), the
calls and how many were made from an earlier one. It also checks that both give every node
the same layout. It asserts nothing else.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import mcu_npu
import mcu_npu.flow.edge  # noqa: F401  (registers the quantized ops)
import mcu_npu.flow.export_in_place as eip
from mcu_npu.graph import fake_values
from torch._subclasses.fake_tensor import FakeTensorMode


class KeywordSpotter(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(40, 64, num_layers=2, batch_first=True)
        self.fc = nn.Linear(64, 12)

    def forward(self, x):
        return self.fc(self.gru(x)[0][:, -1])


def captured():
    """(graph, inputs) of the largest propagation ``export_in_place`` ran in one compile."""
    seen, original = [], eip._propagate

    def keep(graph, inputs):
        copy = torch.fx.Graph()
        copy.output(copy.graph_copy(graph, {}))
        seen.append((copy, [t.detach().clone() for t in inputs]))
        return original(graph, inputs)

    eip._propagate = keep
    try:
        torch.manual_seed(0)
        g = torch.Generator().manual_seed(1)
        calibration = [(torch.randn(1, 49, 40, generator=g),) for _ in range(8)]
        mcu_npu.compile(KeywordSpotter().eval(), calibration[0], target="corstone-300",
                        calibration=calibration)
    finally:
        eip._propagate = original
    return max(seen, key=lambda s: len(s[0].nodes))


def run(graph, inputs, propagation):
    holder = torch.nn.Module()
    holder.graph = graph
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        fakes = [mode.from_tensor(t, static_shapes=True) for t in inputs]
    start = time.process_time()
    with mode:
        propagation(holder, mode).propagate_dont_convert_inputs(*fakes)
    seconds = time.process_time() - start
    return seconds, [(n.name, fake_values.layout(n.meta["val"]))
                     for n in graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(1)
    graph, inputs = captured()
    made, fake_of = [], fake_values._fake_of
    fake_values._fake_of = lambda *a: made.append(1) or fake_of(*a)
    whole, memo = [], []
    for _ in range(args.repeat):
        t, expected = run(graph, inputs, fake_values._Propagation)
        whole.append(t)
        made.clear()
        t, got = run(graph, inputs, fake_values._Memoized)
        memo.append(t)
        assert got == expected, "the propagations differ"
    calls = sum(n.op == "call_function" for n in graph.nodes)
    print(f"nodes {len(graph.nodes)}, calls {calls}, made from an earlier call {len(made)}")
    for name, times in (("whole", whole), ("propagate", memo)):
        print(f"{name:10s} least {min(times):.3f} s  median {statistics.median(times):.3f} s CPU")


if __name__ == "__main__":
    main()
