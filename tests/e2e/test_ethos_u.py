"""Ethos-U targets end to end through Vela: every compute op of the MLPerf Tiny models on
the NPU, Vela's estimates in the report, and the host run (LiteRT over the graph kept beside
the Vela payload) within the numerics contract."""

from __future__ import annotations

import pytest
import torch

import mcu_npu
from mcu_npu.quantization.exact import run_exact
from mcu_npu.device.payload import host_graph_key
from mcu_npu.models.mlperf_tiny import MODELS
from mcu_npu.npu.ethos_u import payload as ethosu_payload
from mcu_npu.estimate.metrics import sqnr_db

from zoo import model_compiles
from device_checks import assert_ethos_u_io_matches
from helpers import DEVICE_OVERHEAD_LIMIT, assert_loads_in_executorch, device_split, sqnr_holds
from zoo.model_compiles import same_compile

pytestmark = pytest.mark.slow


def _compile(name, target):
    model, inputs = MODELS[name]()
    g = torch.Generator().manual_seed(0)
    calibration = [tuple(torch.randn(x.shape, generator=g) for x in inputs) for _ in range(16)]
    prog = mcu_npu.compile(model, inputs, target=target, calibration=calibration)
    tests = [tuple(torch.randn(x.shape, generator=g) for x in inputs) for _ in range(12)]
    return model, prog, tests


@pytest.mark.parametrize("name,target", [
    pytest.param(name, target, marks=same_compile("mlperf", name, target))
    for name in MODELS for target in ["corstone-300", "corstone-320"]])
def test_mlperf_tiny_on_ethos_u(name, target):
    model, prog, tests = model_compiles.mlperf(name, target)
    s = prog.report.summary
    assert s["npu_compiler"] == "vela" and s["ops_on_cpu"] == 0 and s["partitions"] == 1
    assert s["npu_cycles"] > 0 and s["npu_sram_bytes"] > 0
    part = prog.report.partitions[0]
    # Vela counts by its own rules (pooling included, per-architecture kernel splits)
    assert 0.9 * s["macs"] <= part.stats["macs"] <= 1.1 * s["macs"]
    with torch.no_grad():
        floats = torch.cat([model(*t).flatten() for t in tests])
        refs = torch.cat([run_exact(prog.reference, *t).flatten() for t in tests])
    runs = torch.cat([prog.run(*t)[0].flatten() for t in tests])
    assert sqnr_holds(sqnr_db(floats, runs), sqnr_db(floats, refs))
    assert_loads_in_executorch(prog.buffer, tests[0], prog.run(*tests[0]))
    assert_ethos_u_io_matches(prog.buffer)
    split = device_split(prog.buffer)  # the device .pte: payload and program tables only
    assert split["named_data"] == {} and split["constants"] == 0
    assert split["overhead"] <= DEVICE_OVERHEAD_LIMIT, split


def test_vela_payload_is_the_device_layout_and_host_graph_sits_in_the_companion(tmp_path):
    _, prog, tests = _compile("fc_autoencoder", "ethos-u55-128")
    loaded = mcu_npu.load(prog.save(tmp_path / "ae.pte"))
    keys = [k for k in loaded.companion.host_data if k.startswith("mcu_npu.host_graph.")]
    assert len(keys) == 1
    assert not any(k.startswith("mcu_npu.host_graph.") for k in loaded._program.device_named_data)
    from executorch.exir._serialize._program import deserialize_pte_binary

    pte = deserialize_pte_binary(prog.buffer)
    delegate = pte.program.execution_plan[0].delegates[0]
    assert delegate.id == "EthosUBackend"
    payload = bytes(pte.program.backend_delegate_data[delegate.processed.index].data)
    blocks = ethosu_payload.parse(payload)
    assert blocks is not None and keys[0].startswith(host_graph_key(payload) + ".")
    assert torch.equal(loaded.run(*tests[0])[0], prog.run(*tests[0])[0])
    assert_loads_in_executorch(prog.buffer, tests[0], prog.run(*tests[0]))


UPSTREAM_AFTER = """
import sys, torch, mcu_npu
import mcu_npu.backend.delegate  # this project's backends, defined first
import executorch.backends.arm.ethosu  # then upstream's EthosUBackend class
from executorch.exir._serialize._program import deserialize_pte_binary
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1)).eval()
x = torch.randn(1, 3, 12, 10)
prog = mcu_npu.compile(m, (x,), target="ethos-u55-128", calibration=[(x,)])
pte = deserialize_pte_binary(prog.buffer).program
print([d.id for plan in pte.execution_plan for d in plan.delegates])
print(prog.report.partitions[0].compiler, float((prog.run(x)[0] - prog.reference(x)).abs().max()))
sys.path.insert(0, sys.argv[1])  # benchmarks/, for zoo
from zoo.checks import assert_loads_in_executorch
assert_loads_in_executorch(prog.buffer, (x,), prog.run(x))
"""


def test_upstream_arm_backend_in_the_same_process_does_not_take_the_partitions():
    """Upstream's Arm backend registers a class named like the device id; this project's
    partitions still reach its own backend and the program still names the device id."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    benchmarks = os.path.join(root, "benchmarks")
    r = subprocess.run([sys.executable, "-c", UPSTREAM_AFTER, benchmarks], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    ids, last = r.stdout.strip().splitlines()[-2:]
    assert ids == "['EthosUBackend']"
    compiler, err = last.split()
    assert compiler == "vela" and float(err) <= 0.2
