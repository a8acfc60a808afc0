"""ExecuTorch's own runtime runs our programs (``run(runtime="executorch")``): the device glue
builds once and is cached, its backends move delegate data as the device runtimes do (Vela's
memcpy; Neutron's flagged transposes through its argument maps) and refuse what they refuse,
and a copy rule broken on either side shows as a difference between the two runtimes.
"""

from __future__ import annotations

import math
import types

import pytest
import torch
from helpers import assert_same_outputs, calibration_set
from zoo.neutron_sdk_double import Behaviour, install

import mcu_npu
from mcu_npu.errors import ConfigError, InvalidProgramError, RuntimeUnavailableError
from mcu_npu.npu.ethos_u import FAMILY as ETHOS_U
from mcu_npu.runtime import load as load_program
from mcu_npu.runtime import npu_emulator
from mcu_npu.runtime.delegates import DeviceTensor, register_emulator, unregister_emulator
from mcu_npu.runtime.executorch import ExecutorchProgram, bridge, build

from test_device_io import ConvNet, TwoInputs


def _inputs(case: str, channels_last: bool = False):
    torch.manual_seed(0)
    if case == "two_inputs":
        return TwoInputs().eval(), (torch.randn(1, 5, 10, 12), torch.randn(1, 1, 10, 12))
    x = torch.randn(1, 4, 18, 14)
    return ConvNet().eval(), (x.to(memory_format=torch.channels_last) if channels_last else x,)


def _samples(inputs, n=3):
    return [tuple(s.to(memory_format=torch.channels_last)
                  if e.dim() == 4 and not e.is_contiguous() else s
                  for s, e in zip(sample, inputs)) for sample in calibration_set(inputs, n=n,
                                                                                 seed=7)]


_PROGRAMS = {}


def program(case: str, target: str, compiler: str = "auto", channels_last: bool = False):
    """(compiled program, samples), compiled once per test process."""
    key = (case, target, compiler, channels_last)
    if key not in _PROGRAMS:
        model, inputs = _inputs(case, channels_last)
        with pytest.MonkeyPatch.context() as patch:
            if compiler == "neutron":
                install(patch, Behaviour(reverse_inputs=case == "two_inputs"))
            prog = mcu_npu.compile(model, inputs, target=target, npu_compiler=compiler,
                                   calibration=_samples(inputs, n=8))
        _PROGRAMS[key] = prog, _samples(inputs)
    return _PROGRAMS[key]


PROGRAMS = [("conv", "corstone-300", "auto", False), ("conv", "corstone-300", "auto", True),
            ("two_inputs", "corstone-300", "auto", False),
            ("conv", "imxrt700", "reference", False), ("conv", "imxrt700", "reference", True),
            ("conv", "imxrt700", "neutron", False), ("conv", "imxrt700", "neutron", True),
            ("two_inputs", "imxrt700", "neutron", False)]


@pytest.mark.parametrize("case,target,compiler,channels_last", PROGRAMS)
def test_small_programs_run_in_executorch_as_on_the_host(case, target, compiler,
                                                        channels_last):
    prog, samples = program(case, target, compiler, channels_last)
    for sample in samples:
        assert_same_outputs(prog.run(*sample), prog.run(*sample, runtime="executorch"),
                            "the host runtime", "ExecuTorch's runtime")


def test_the_glue_is_built_once_per_source_and_version(tmp_path, monkeypatch):
    monkeypatch.setenv("MCU_NPU_CACHE", str(tmp_path))
    first = build.library()
    assert first.parent == tmp_path and build.wheel().version in first.name
    stamp = first.stat().st_mtime_ns
    assert build.library() == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary left behind


def test_without_a_compiler_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("MCU_NPU_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    with pytest.raises(RuntimeUnavailableError, match=r"apt-get install g\+\+"):
        build.library()
    monkeypatch.setattr(bridge, "_lib", None)  # as in a process that has not built it yet
    prog, samples = program("conv", "corstone-300")
    fresh = mcu_npu.load(prog.buffer, companion=prog.companion)
    with pytest.raises(RuntimeUnavailableError, match="no C\\+\\+ compiler found"):
        fresh.run(*samples[0], runtime="executorch")
    assert fresh.run(*samples[0])  # the host runtime needs no compiler


def test_a_wheel_without_its_headers_is_named(tmp_path):
    with pytest.raises(RuntimeUnavailableError, match="lacks its C\\+\\+ headers .*, c10 "
                                                      "headers .*, runtime library"):
        build.wheel(tmp_path)


def test_workers_building_at_once_share_one_library(tmp_path):
    """Two processes building into an empty cache at the same time: both load the same
    library, and no partial file is left."""
    import os
    import subprocess
    import sys

    code = "from mcu_npu.runtime.executorch import build; print(build.library())"
    env = {**os.environ, "MCU_NPU_CACHE": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    paths = {out.strip() for out, _ in results}
    assert len(paths) == 1 and [str(p) for p in tmp_path.iterdir()] == list(paths)


def test_an_unknown_runtime_is_a_config_error():
    prog, samples = program("conv", "corstone-300")
    with pytest.raises(ConfigError, match="unknown runtime 'board'.*host, executorch"):
        prog.run(*samples[0], runtime="board")


def _fresh(prog):
    """The program loaded anew, so its delegates initialize again in ExecuTorch's runtime."""
    return load_program(prog.buffer, prog.host_data)


def test_a_bridge_that_ignores_the_neutron_format_flag_differs_from_the_host(monkeypatch):
    """With the flags read as 0 the glue hands the NPU the contiguous (N, C, H, W) bytes
    where the device transposes to channels last: ExecuTorch's run no longer equals the
    host's."""
    prog, samples = program("conv", "imxrt700", "neutron")
    neutron_io = npu_emulator.neutron_io

    def flags_ignored(*args):
        io = neutron_io(*args)
        return type(io)(tuple(0 for _ in io.input_formats), tuple(0 for _ in io.output_formats),
                        io.input_map, io.output_map, io.num_input_args)

    # the bridge's view of the emulator module only: the host runtime keeps the real rule
    view = types.SimpleNamespace(**{**vars(npu_emulator), "neutron_io": flags_ignored})
    monkeypatch.setattr(bridge, "npu_emulator", view)
    broken = ExecutorchProgram(_fresh(prog))
    with pytest.raises(AssertionError, match="differs"):
        assert_same_outputs(prog.run(*samples[0]), broken.run(samples[0]))


def test_a_neutron_flag_dropped_on_a_channels_last_input_is_refused_as_on_the_device(
        monkeypatch):
    """Unflagged, the device takes only contiguous tensors: a channels-last input is refused
    (``execute`` returns InvalidProgram) in both runtimes."""
    prog, samples = program("conv", "imxrt700", "neutron", channels_last=True)
    neutron_io = npu_emulator.neutron_io

    def input_flag_dropped(*args):
        io = neutron_io(*args)
        assert io.input_formats == (1,)
        return type(io)((0,), io.output_formats, io.input_map, io.output_map,
                        io.num_input_args)

    monkeypatch.setattr(npu_emulator, "neutron_io", input_flag_dropped)
    with pytest.raises(InvalidProgramError, match="Neutron input 0: the runtime expects a "
                                                  "contiguous dim order"):
        ExecutorchProgram(_fresh(prog)).run(samples[0])
    with pytest.raises(InvalidProgramError, match="Neutron input 0: the Neutron runtime "
                                                  "expects a contiguous dim order"):
        _fresh(prog).run(*samples[0])


def test_a_host_emulator_that_transposes_where_ethos_u_copies_differs_from_executorch():
    """The host's Ethos-U emulator made to hand the NPU a channels-last copy of each input
    (where EthosUBackend.cpp memcpys it as it lies): the real runtime's glue copies as the
    device does, so the two runtimes disagree."""
    prog, samples = program("conv", "corstone-300")
    truth = prog.run(*samples[0], runtime="executorch")

    def transposing(processed, specs, named, inputs, outputs):
        moved = [DeviceTensor(t.tensor, (0, 2, 3, 1)) for t in inputs]
        npu_emulator.run_ethos_u(processed, specs, named, moved, outputs)

    unregister_emulator("EthosUBackend")
    try:
        register_emulator("EthosUBackend", transposing, ETHOS_U.input_count)
        with pytest.raises(AssertionError, match="differs"):
            assert_same_outputs(_fresh(prog).run(*samples[0]), truth)
    finally:
        unregister_emulator("EthosUBackend")
        register_emulator("EthosUBackend", npu_emulator.run_ethos_u,
                          ETHOS_U.input_count)
    assert_same_outputs(_fresh(prog).run(*samples[0]), truth)


def test_a_bridge_that_transposes_where_ethos_u_copies_differs_from_the_host(monkeypatch):
    """The glue's NPU input regions reordered from (N, C, H, W) to channels last before the
    NPU reads them (where EthosUBackend.cpp memcpys): ExecuTorch's run no longer equals the
    host's."""
    prog, samples = program("conv", "corstone-300")
    (sizes,) = [tuple(x.shape) for x in samples[0]]
    run_npu = bridge.run_npu

    def transposing(call, inputs, outputs):
        moved = []
        for region in inputs:
            if region.size == math.prod(sizes):  # the int8 image
                region = region.reshape(sizes).transpose(0, 2, 3, 1).reshape(-1).copy()
            moved.append(region)
        run_npu(call, moved, outputs)

    monkeypatch.setattr(bridge, "run_npu", transposing)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_outputs(prog.run(*samples[0]), ExecutorchProgram(_fresh(prog)).run(
            samples[0]))


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.__setitem__(5, d[5] + 1), "Input tensor sizes do not match"),
    (lambda d: d.__setitem__(3, 2), "runtime copies only int32"),
    (lambda d: d.__setitem__(0, 3), "the call passes 2 arguments"),
])
def test_the_ethos_u_glue_refuses_what_the_device_refuses(edit, match, monkeypatch):
    """A payload read as needing another element count, element size or arity: the glue's
    EthosUBackend returns InvalidProgram from execute, as the device's does."""
    prog, samples = program("conv", "corstone-300")
    describe = bridge.describe

    def doctored(*args):
        flat, call = describe(*args)
        flat = list(flat)
        edit(flat)  # flat: n_in, n_out, scratch, then (element size, offset, count) per I/O
        return flat, call

    monkeypatch.setattr(bridge, "describe", doctored)
    with pytest.raises(InvalidProgramError, match=match):
        ExecutorchProgram(_fresh(prog)).run(samples[0])


class AdaptiveMaxPool(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.adaptive_max_pool2d(x, 3) * 2


def test_a_kernel_the_runtime_lacks_gets_its_tensor_list_arguments():
    """``aten::adaptive_max_pool2d.out`` is in no kernel library of the wheel: the glue
    registers the host kernel, which gets the call's values, its returns boxed in a tensor
    list among them, over the runtime's memory."""
    from executorch.exir import EdgeCompileConfig, to_edge

    x = torch.randn(1, 3, 7, 8)
    config = EdgeCompileConfig(
        _core_aten_ops_exception_list=[torch.ops.aten.adaptive_max_pool2d.default])
    buffer = to_edge(torch.export.export(AdaptiveMaxPool(), (x,)),
                     compile_config=config).to_executorch().buffer
    program = load_program(buffer)
    got = ExecutorchProgram(program).run((x,))
    assert "aten::adaptive_max_pool2d.out" in bridge.provided_kernels()
    assert_same_outputs(program.run(x), got)
    assert torch.equal(got[0], AdaptiveMaxPool()(x))


def test_a_vela_program_without_its_companion_says_so_in_executorch_too(tmp_path):
    """The Vela payload's graph is in the companion file: without it the delegate's init
    fails, and the error is the host runtime's."""
    from mcu_npu.errors import HostDataMissingError

    prog, samples = program("conv", "corstone-300")
    path = prog.save(tmp_path / "conv.pte")
    path.with_suffix(".ptd").unlink()
    with pytest.raises(HostDataMissingError, match="needs its companion file"):
        mcu_npu.load(path).run(*samples[0], runtime="executorch")


def test_cli_run_takes_the_runtime(tmp_path):
    import numpy as np
    from helpers import run_cli

    prog, samples = program("conv", "corstone-300")
    path = prog.save(tmp_path / "conv.pte")
    x, y = tmp_path / "x.npy", tmp_path / "y.npy"
    np.save(x, samples[0][0].numpy())
    r = run_cli("run", path, "--input", x, "--output", y, "--runtime", "executorch")
    assert r.returncode == 0, r.stderr
    assert torch.equal(torch.from_numpy(np.load(y)), prog.run(*samples[0])[0])
    r = run_cli("run", path, "--input", x, "--runtime", "board")
    assert r.returncode != 0 and "--runtime" in r.stderr and "executorch" in r.stderr


def test_an_etdump_records_the_host_runtime_only(tmp_path):
    prog, samples = program("conv", "corstone-300")
    with pytest.raises(ConfigError, match="etdump= records a run of the host runtime"):
        prog.run(*samples[0], etdump=tmp_path / "run.etdp", runtime="executorch")
    assert not (tmp_path / "run.etdp").exists()


def test_a_program_and_its_executorch_load_go_together():
    """The program loaded in ExecuTorch's runtime for a host program lives as long as the
    host program: then its delegates are destroyed and release their NPU graphs."""
    import gc
    import weakref

    from mcu_npu.runtime.executorch import run_with

    prog, samples = program("conv", "corstone-300")
    fresh = _fresh(prog)
    run_with("executorch", fresh, samples[0])
    held, gone = len(bridge._handles), weakref.ref(fresh)
    del fresh
    gc.collect()
    assert gone() is None and len(bridge._handles) == held - 1


EXIT_SCRIPT = """
import atexit, importlib, torch, mcu_npu


def left():  # runs after mcu-npu's exit handler; the script holds no reference to the bridge
    bridge = importlib.import_module("mcu_npu.runtime.executorch.bridge")
    print("delegates left at exit:", len(bridge._handles), flush=True)


atexit.register(left)


class Net(torch.nn.Module):  # a convolution for the NPU, a pooling the runtime has no kernel for
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.nn.functional.adaptive_max_pool2d(self.a(x), 2)


torch.manual_seed(0)
x = torch.randn(1, 3, 8, 8)
progs = []
for _ in range(2):
    prog = mcu_npu.compile(Net().eval(), (x,), target="corstone-300", calibration=[(x,)])
    prog.run(x, runtime="executorch")
    progs.append(prog)
print("ran", len(progs), flush=True)
"""


def test_a_script_holding_executorch_loads_exits_cleanly():
    """Two programs loaded in ExecuTorch's runtime and held by the script to its end: at exit
    their delegates are released while Python is whole, and nothing the interpreter destroys
    while it finalises calls back into Python (that crashed the process: exit code -11)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(mcu_npu.__file__).resolve().parents[1])
    paths = [src, os.environ.get("PYTHONPATH")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    out = subprocess.run([sys.executable, "-X", "faulthandler", "-W", "ignore", "-c", EXIT_SCRIPT],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[-3:] == ["ran 2", "delegates left at exit: 0", ""], out.stdout
