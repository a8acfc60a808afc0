"""A third NPU family, added as ``docs/adding_an_npu.md`` says and nothing else: a toy NPU whose
compiler takes only ADD, with a payload format of its own. It goes end to end: the
partitioner gives it the adds and leaves the rest to the Cortex-M kernels with the compiler's
reason, the payload reaches the ``.pte`` under its backend id with the partition's graph in
the companion, the host runtime runs it by the family's rules, and ``mcu-npu check`` reads it."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import struct
import warnings

import pytest
import torch
from torch import nn

import mcu_npu
from helpers import sqnr_db
from mcu_npu.device.delegate_io import NpuTensor, graph_tensors, io_problems
from mcu_npu.device.payload import pack_reference
from mcu_npu.errors import ConfigError, InvalidProgramError, NpuCompilerError
from mcu_npu.firmware.check import check_program
from mcu_npu.npu import families
from mcu_npu.npu.base import NpuArtifact
from mcu_npu.npu.family import NpuFamily
from mcu_npu.runtime import register_emulator, run_copying
from mcu_npu.runtime.delegates import unregister_emulator
from mcu_npu.targets import NpuSpec, get_target, register_target, spec as target_spec
from mcu_npu.tflite.describe import op_names

presets = importlib.import_module("mcu_npu.targets")  # mcu_npu.targets is also a function

MAGIC = b"TOY0"
HEADER = struct.Struct("<4sII")


def _only_add(model, target) -> dict:
    """Graph node -> why the toy compiler leaves it: every operator but ADD."""
    return {model.op_origins[i]: f"the toy NPU runs ADD only, not {op}"
            for i, op in enumerate(op_names(model.buffer)) if op != "ADD"}


class ToyCompiler:
    """The toy vendor compiler: a header (magic, input and output counts) and the digest of
    the partition's graph, which the host keeps beside the payload."""

    name = "toy"

    def available(self) -> bool:
        return True

    def compile(self, model, target) -> NpuArtifact:
        refused = _only_add(model, target)
        if refused:
            raise NpuCompilerError("; ".join(refused.values()), tool=self.name)
        graph = pack_reference(model, {"compiler": self.name, "target": target.name})
        payload = HEADER.pack(MAGIC, len(model.inputs), len(model.outputs)) + \
            hashlib.sha256(graph).digest()
        return NpuArtifact(self.name, payload, {"npu_flash_bytes": len(payload)}, graph)


def _header(payload: bytes) -> tuple[int, int]:
    payload = bytes(payload)
    if len(payload) < HEADER.size or payload[:4] != MAGIC:
        raise InvalidProgramError("not a toy NPU payload")
    return HEADER.unpack_from(payload)[1:]


def _problem(kind: str, i: int, dtype, numel: int, npu) -> str | None:
    if (dtype.itemsize, numel) != (npu.elem_size, npu.count):
        return f"toy {kind} {i}: {numel} x {dtype} for {npu.count} x {npu.elem_size} bytes"
    return None


TOY = NpuFamily(
    kind="toy-npu", backend_id="ToyNpuBackend", compiler="toy", adapter=lambda: ToyCompiler,
    compiler_version=lambda: "1.0", install_hint="install the toy SDK",
    input_count=lambda payload, named: _header(payload)[0],
    npu_tensors=lambda payload, graph: None if graph is None else graph_tensors(graph),
    input_problem=functools.partial(_problem, "input"),
    output_problem=functools.partial(_problem, "output"),
    runtime_record=lambda payloads: {"runtime": "ToyNpuBackend", "delegate_payload": "toy"},
    memory_figures=lambda blob: {"weights": 0, "commands": len(blob), "scratch": 0,
                                 "estimated": False, "in_place": True, "formats": None},
    payload_problems=lambda data, inputs, outputs, target:
        [] if bytes(data)[:4] == MAGIC else ["not a toy NPU payload"],
    operator_check=_only_add)

@pytest.fixture
def toy(monkeypatch):
    """The family, its target and its host emulator registered as a plug-in would, and
    forgotten afterwards."""
    monkeypatch.setattr(families, "_FAMILIES", dict(families._FAMILIES))
    monkeypatch.setattr(target_spec, "_REGISTERED_KINDS", set(target_spec._REGISTERED_KINDS))
    monkeypatch.setattr(presets, "_PRESETS", dict(presets._PRESETS))
    families.register(TOY)
    npu = NpuSpec(kind="toy-npu", name="Toy NPU", macs_per_cycle=32, clock_hz=200_000_000,
                  sram_bytes=1 << 20, vendor_compiler="toy", compiler_checks_operators=True)
    target = register_target(dataclasses.replace(  # the i.MX RT700's CPU and memory
        get_target("imxrt700"), name="toy-soc", description="a Cortex-M33 beside a toy NPU",
        npu=npu))
    register_emulator(TOY.backend_id, functools.partial(run_copying, TOY), TOY.input_count)
    yield target
    unregister_emulator(TOY.backend_id)


class AddNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x, y):
        s = x + y
        return self.fc(s) + s


def _samples(n=8):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(1, 16, generator=g), torch.randn(1, 16, generator=g))
            for _ in range(n)]


def test_a_third_family_runs_end_to_end(toy, tmp_path):
    torch.manual_seed(0)
    model, samples = AddNet().eval(), _samples()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = mcu_npu.compile(model, samples[0], calibration=samples, target="toy-soc")

    # the partitioner: the adds on the toy NPU, the linear layer on the CPU with the reason
    placed = [(op.op, op.placement, op.reason) for op in prog.report.ops]
    assert placed == [
        ("aten.add.Tensor", "NPU partition 0", ""),
        ("aten.linear", "Cortex-M int8 kernel", "the toy NPU runs ADD only, not FULLY_CONNECTED"),
        ("aten.add.Tensor", "NPU partition 1", "")]
    assert [(p.compiler, p.tflite_ops) for p in prog.report.partitions] == [("toy", ["ADD"])] * 2
    assert prog.report.versions["runtime"] == "ToyNpuBackend"
    assert prog.report.versions["npu_compilers"] == {"toy": "1.0"}

    # the payload: under the family's backend id, the graph in the companion
    path = prog.save(tmp_path / "toy.pte")
    data = path.read_bytes()
    assert b"ToyNpuBackend" in data and MAGIC in data and b"TFL3" not in data
    assert check_program(path, "toy-soc") == []
    (line,) = check_program(path, "imxrt700")[:1]
    assert "target imxrt700 runs NeutronBackend delegates, not ToyNpuBackend" in line

    # the host runtime: the family's emulator, the same outputs after a fresh load
    loaded = mcu_npu.load(path)
    got, want = [], []
    for inputs in samples:
        out = prog.run(*inputs)[0]
        assert torch.equal(out, loaded.run(*inputs)[0])
        got.append(out)
        want.append(model(*inputs).detach())
    assert sqnr_db(torch.cat(want), torch.cat(got)) > 30


def test_the_family_s_rules_are_the_ones_applied(toy):
    (problem,) = io_problems(TOY, [(torch.float32, (1, 16))], [], [NpuTensor(16, 1)], [])
    assert problem == "toy input 0: 16 x torch.float32 for 16 x 1 bytes"
    assert io_problems(TOY, [(torch.int8, (1, 16))], [], [NpuTensor(16, 1)], []) == []


def test_a_kind_nobody_registered_is_refused():
    with pytest.raises(ConfigError, match="unknown NPU kind 'toy-npu'"):
        NpuSpec(kind="toy-npu", name="Toy NPU", macs_per_cycle=32, clock_hz=1, sram_bytes=1,
                vendor_compiler="toy")
    with pytest.raises(ConfigError, match="no NPU family 'toy-npu'"):
        families.family("toy-npu")


def test_a_family_may_not_take_another_s_backend_id(toy):
    with pytest.raises(ConfigError, match="already family 'ethos-u'"):
        families.register(dataclasses.replace(TOY, kind="other", backend_id="EthosUBackend"))


def _crashes_on_anything_but_add(model, target) -> dict:
    if _only_add(model, target):
        raise RuntimeError("the toy SDK crashed")
    return {}


class CrashingCompiler(ToyCompiler):
    def compile(self, model, target):
        raise RuntimeError("the toy compiler crashed")


def _compile_on(target):
    torch.manual_seed(0)
    model, samples = AddNet().eval(), _samples()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = mcu_npu.compile(model, samples[0], calibration=samples, target=target.name)
    assert sqnr_db(model(*samples[1]).detach(), prog.run(*samples[1])[0]) > 30
    return {(op.op, op.placement, op.reason) for op in prog.report.ops}


def test_a_crashing_operator_check_moves_what_it_crashes_on_to_the_cpu(toy):
    """The check crashes on the partition with the linear layer, then on the linear layer
    alone: that goes to the CPU with the crash as its reason, the adds stay on the NPU."""
    families.register(dataclasses.replace(TOY, operator_check=_crashes_on_anything_but_add))
    assert _compile_on(toy) == {
        ("aten.add.Tensor", "NPU partition 0", ""),
        ("aten.linear", "Cortex-M int8 kernel",
         "the NPU compiler failed on it: RuntimeError: the toy SDK crashed"),
        ("aten.add.Tensor", "NPU partition 1", "")}


def test_a_crashing_compiler_moves_its_partitions_to_the_cpu(toy):
    """The compiler crashes on each partition as it lowers: the adds run on the CPU (the
    portable kernels, as a partition that fails that late does), with the crash as reason."""
    families.register(dataclasses.replace(TOY, adapter=lambda: CrashingCompiler))
    crashed = "the NPU compiler failed on its partition: RuntimeError: the toy compiler crashed"
    assert _compile_on(toy) == {
        ("aten.add.Tensor", "portable float kernel", crashed),
        ("aten.linear", "Cortex-M int8 kernel", "the toy NPU runs ADD only, not FULLY_CONNECTED")}
