"""The public passes and ``mcu_npu.nn`` modules used on their own, each in a fresh process:
no other import of the package registers an operator (``quantized_decomposed.*``) first."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

PASSES = {
    "SplitGRUByLayers": "torch.nn.GRU(4, 6, num_layers=2, batch_first=True)",
    "DecomposeGRU": "torch.nn.GRU(4, 6, batch_first=True)",
    "DecomposeRNN": "torch.nn.RNN(4, 6, batch_first=True)",
    "DecomposeLSTM": "torch.nn.LSTM(4, 6, batch_first=True)",
}

PASS_SCRIPT = """
import torch
import mcu_npu
from mcu_npu.passes import {name}

torch.manual_seed(0)
module = {module}.eval()
x = torch.randn(1, 3, 4)
gm = torch.export.export(module, (x,)).module()
result = {name}()(gm)
assert result.modified
left = [n.target for n in result.graph_module.graph.nodes
        if n.op == "call_function" and "{op}" in str(n.target)]
assert {left_expected}, left
torch.testing.assert_close(result.graph_module(x), module(x), rtol=1e-5, atol=1e-6)
print("ok")
"""

NN_SCRIPT = """
import torch
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
import mcu_npu
from mcu_npu.nn import {name}, {name}Cell
from mcu_npu.quantization import NpuQuantizer

torch.manual_seed(0)
for ours, theirs, x in (({name}, torch.nn.{name}(4, 6, batch_first=True), torch.randn(1, 3, 4)),
                         ({name}Cell, torch.nn.{name}Cell(4, 6), torch.randn(1, 4))):
    theirs = theirs.eval()
    module = ours.from_float(theirs).eval()
    torch.testing.assert_close(module(x), theirs(x), rtol=1e-5, atol=1e-6)
    gm = torch.export.export(module, (x,)).module()
    prepared = prepare_pt2e(gm, NpuQuantizer())
    prepared(x)
    converted = convert_pt2e(prepared)
    assert any("quantize_per_tensor" in str(n.target) for n in converted.graph.nodes)
    converted(x)
print("ok")
"""


def run_fresh(script: str) -> subprocess.CompletedProcess:
    paths = [str(SRC), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, paths)))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, env=env, timeout=300)


@pytest.mark.parametrize("name", sorted(PASSES))
def test_public_pass_runs_in_a_fresh_process(name):
    split = name == "SplitGRUByLayers"
    op = "gru" if split else name[len("Decompose"):].lower()
    script = PASS_SCRIPT.format(name=name, module=PASSES[name], op=op,
                                left_expected="len(left) == 2" if split else "not left")
    out = run_fresh(script)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


@pytest.mark.parametrize("name", ["GRU", "LSTM", "RNN"])
def test_nn_module_quantizes_in_a_fresh_process(name):
    out = run_fresh(NN_SCRIPT.format(name=name))
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
