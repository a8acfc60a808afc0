"""Quantization results do not depend on the host CPU.

Float32 convolutions sum in an order chosen by the host's kernels (oneDNN by ISA and cache
sizes, ATen by ``ATEN_CPU_CAPABILITY``), and a last-bit difference in a model's BatchNorm
statistics or in an observed range changes scales, biases and, through rounding, int8
results by whole steps: MobileNetV1 compiled on an AMD EPYC (oneDNN AVX2 code) failed the
accuracy contract that it met on an AVX-512 Xeon. Each case below runs the same computation
in subprocesses under other kernel choices and requires bit-identical results: the MLPerf Tiny
model (its BatchNorm statistics), the quantization parameters of its calibrated PT2E graph
and the converted reference evaluated by ``run_exact``.

The subprocesses draw their data with NumPy: ``torch.randn`` itself gives other float32 values
under ``ATEN_CPU_CAPABILITY=default`` than with AVX2 (its Box-Muller transform has a
vectorized path), so it cannot feed a comparison across that setting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import hashlib, json, sys
import numpy as np
import torch

torch.set_num_threads(int(sys.argv[2]))
from mcu_npu.models.mlperf_tiny import mobilenet_v1_025
from mcu_npu.flow.export import export_module
from mcu_npu.quantization import quantize
from mcu_npu.quantization.exact import run_exact


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


model, example = mobilenet_v1_025()
out = {"model": digest(model.state_dict().values())}
# the quantization is compared on one model, the first run's (torch.randn made the weights)
if sys.argv[1] == "save":
    torch.save(model.state_dict(), sys.argv[3])
else:
    model.load_state_dict(torch.load(sys.argv[3]))
rng = np.random.default_rng(0)
data = [(torch.from_numpy(rng.standard_normal((1, 3, 96, 96)).astype(np.float32)),)
        for _ in range(3)]
reference = quantize(export_module(model, example[:1]), data[0], data[:2])
qparams = []
for node in reference.graph.nodes:
    if node.op == "call_function" and "quantize" in str(node.target):
        qparams.append([str(a) if isinstance(a, torch.fx.Node) else repr(a)
                        for a in node.args[1:3]])
consts = [t for _, t in sorted(reference.state_dict().items())]
out["qparams"] = qparams
out["constants"] = digest(consts)
out["exact"] = digest([run_exact(reference, *data[2])])
print("RESULT " + json.dumps(out))
"""

# (environment, threads): oneDNN's oldest and newest x86 code, ATen's scalar kernels
SETTINGS = [
    ({}, 2),
    ({"ONEDNN_MAX_CPU_ISA": "SSE41", "DNNL_MAX_CPU_ISA": "SSE41"}, 1),
    ({"ATEN_CPU_CAPABILITY": "default"}, 1),
]


def _run(env_extra, threads, mode, state_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")}
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(threads), state_path],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine != "x86_64",
                    reason="the kernel choices varied are x86-64 ones")
def test_mobilenet_and_its_quantization_are_the_same_under_other_cpu_kernels(tmp_path):
    state = str(tmp_path / "mobilenet.pt")
    first = _run(*SETTINGS[0], "save", state)
    for env, threads in SETTINGS[1:]:
        other = _run(env, threads, "load", state)
        if "ATEN_CPU_CAPABILITY" not in env:  # torch.randn draws the model's weights
            assert other["model"] == first["model"], f"model differs under {env}"
        assert other["qparams"] == first["qparams"], f"quantization parameters differ under {env}"
        assert other["constants"] == first["constants"], f"int weights / biases differ under {env}"
        assert other["exact"] == first["exact"], f"run_exact output differs under {env}"
