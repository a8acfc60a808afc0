"""The model-level programs run in ExecuTorch's own runtime (``run(runtime="executorch")``)
with outputs equal, bit for bit, to the host runtime's: the MLPerf Tiny models on
corstone-300, corstone-320 (Vela payloads) and imxrt700, the GRU keyword spotter on
corstone-300 and imxrt700, and the model-library set on the three targets (the Cortex-M
kernels of what the NPU leaves included). The programs are the compiles the model-level tests check
(``model_compiles``, ``public.compiled``), shared through their xdist groups.

Each run is also counted: the runtime must reach the NPU backend once per delegate call and
the host kernels once per call of an operator it lacks, so an equal output cannot come from
a path that skips them."""

from __future__ import annotations

import pytest

import mcu_npu
from zoo import model_compiles, public
from helpers import assert_same_outputs
from mcu_npu.models.mlperf_tiny import MODELS as MLPERF
from mcu_npu.runtime.executorch import bridge
from zoo.model_compiles import same_compile

pytestmark = pytest.mark.slow
TARGETS = ["corstone-300", "corstone-320", "imxrt700"]


@pytest.fixture
def calls(monkeypatch):
    """Counts of the NPU computes and host kernel calls ExecuTorch's runtime makes."""
    counts = {"npu": 0, "kernels": 0}
    run_npu, run_kernel = bridge.run_npu, bridge.run_kernel

    def npu(*args):
        counts["npu"] += 1
        return run_npu(*args)

    def kernel(*args):
        counts["kernels"] += 1
        return run_kernel(*args)

    monkeypatch.setattr(bridge, "run_npu", npu)
    monkeypatch.setattr(bridge, "run_kernel", kernel)
    return counts


def _calls_per_run(program) -> tuple[int, int]:
    """(delegate calls, calls of the kernels the glue provides) of one run of ``forward``,
    from the program's instructions."""
    plan = program._plans["forward"]
    provided = bridge.provided_kernels()
    delegates = kernels = 0
    for chain in plan.chains:
        for instruction in chain.instructions:
            call = instruction.instr_args
            if type(call).__name__ == "DelegateCall":
                delegates += 1
            elif type(call).__name__ == "KernelCall":
                op = plan.operators[call.op_index]
                name = f"{op.name}.{op.overload}" if op.overload else op.name
                kernels += name in provided
    return delegates, kernels


def assert_runs_alike(prog, samples, calls) -> None:
    """Every sample gives the same outputs in both runtimes, and ExecuTorch's runtime runs
    the program's delegate and Cortex-M kernel calls through the glue."""
    for sample in samples:
        sample = sample if isinstance(sample, tuple) else (sample,)
        host = prog.run(*sample)  # (the conftest runs it in ExecuTorch's runtime too)
        delegates, kernels = _calls_per_run(prog._program._program)
        assert delegates > 0, "the program delegates nothing to the NPU"
        before = dict(calls)
        got = prog.run(*sample, runtime="executorch")
        assert calls["npu"] - before["npu"] == delegates
        assert calls["kernels"] - before["kernels"] == kernels
        assert_same_outputs(host, got, "the host runtime", "ExecuTorch's runtime")


@pytest.mark.parametrize("name,target", [
    pytest.param(name, target, marks=same_compile("mlperf", name, target))
    for name in MLPERF for target in TARGETS])
def test_mlperf_tiny_runs_in_executorch_as_on_the_host(name, target, calls, tmp_path):
    _, prog, tests = model_compiles.mlperf(name, target)
    assert_runs_alike(prog, tests[:4], calls)
    # from the files a user deploys: the .pte, and the companion holding the host graphs
    loaded = mcu_npu.load(prog.save(tmp_path / f"{name}.pte"))
    assert_same_outputs(prog.run(*tests[0]), loaded.run(*tests[0], runtime="executorch"),
                        "the compiled program", "its saved .pte in ExecuTorch's runtime")


@pytest.mark.parametrize("target", [
    pytest.param("corstone-300", marks=same_compile("kws", "corstone-300")),
    pytest.param("imxrt700", marks=same_compile("recurrent", "kws_gru2"))])
def test_gru_keyword_spotter_runs_in_executorch_as_on_the_host(target, calls):
    """On a Vela payload (corstone-300) and a Neutron one. The U85's payloads reach the
    same delegate call in ExecuTorch's runtime: the MLPerf Tiny and model-library cases
    run them (a third 30 s compile of this model would check nothing new)."""
    if target == "imxrt700":
        _, prog, tests = model_compiles.recurrent("kws_gru2")
    else:  # the corstone-300 program is test_int16's
        _, prog, tests = model_compiles.keyword_spotter(target)
    assert_runs_alike(prog, tests[:4], calls)


@pytest.mark.parametrize("name,target", [
    pytest.param(name, target, marks=public.same_compile(name, target))
    for name in public.TEST_SET for target in public.targets_of(name)])
def test_model_library_runs_in_executorch_as_on_the_host(name, target, calls):
    _, prog, tests, _ = public.compiled(name, target)
    assert_runs_alike(prog, tests[:2], calls)
    if target not in public.TEST_SET[name]:
        return
    assert _calls_per_run(prog._program._program) == (1, 2)  # one partition; I/O quantize
