"""No compile emits a program a device runtime refuses: every delegate call's tensors are
checked against EthosUBackend.cpp / NeutronBackend.cpp's rules (``device.delegate_io``)
before the program is written, by the same functions the host runtime refuses a call with;
a partition boundary that breaks them is repaired (the CPU quantizes) or the partition
moves to the CPU."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import mcu_npu
from helpers import sqnr_db, sqnr_holds
from mcu_npu.device.delegate_io import NpuTensor, io_problems
from mcu_npu.errors import InvalidProgramError
from mcu_npu.firmware.check import io_problems_of
from mcu_npu.partition import propose
from mcu_npu.quantization.exact import run_exact
from mcu_npu.npu import ethos_u, neutron
from mcu_npu.runtime.pte import Program
from mcu_npu.tflite.ops_aliases import QUANTIZE

TARGETS = ("imxrt700", "corstone-300", "corstone-320")


# --- the rules ------------------------------------------------------------------------------
def test_ethos_u_takes_integer_tensors_of_the_records_element_size_only():
    ethos_u_input_problem = ethos_u.FAMILY.input_problem
    one_byte = NpuTensor(12, 1)
    assert ethos_u_input_problem(0, torch.int8, 12, one_byte) is None
    assert ethos_u_input_problem(0, torch.uint8, 12, one_byte) is None
    assert ethos_u_input_problem(1, torch.float32, 12, one_byte).startswith(
        "Ethos-U input 1 is torch.float32 for a 1-byte NPU input")
    assert "int16" in ethos_u_input_problem(0, torch.int16, 12, one_byte)
    assert ethos_u_input_problem(0, torch.int16, 12, NpuTensor(12, 2)) is None
    assert "Input tensor sizes do not match" in ethos_u_input_problem(0, torch.int8, 10,
                                                                      one_byte)
    (problem,) = io_problems(ethos_u.FAMILY, [(torch.int8, (1, 12))],
                             [(torch.float32, (3,))], [one_byte], [NpuTensor(3, 1)])
    assert problem.startswith("Ethos-U output 0: the program's tensor is 12 bytes")
    assert io_problems(ethos_u.FAMILY, [], [], [one_byte], [])[0].startswith(
        "the NPU takes 1 inputs")


def test_neutron_takes_tensors_of_the_npu_tensors_element_size_and_count():
    rules = neutron.FAMILY
    assert rules.input_problem(0, torch.int8, 6, NpuTensor(6, 1)) is None
    assert "4 bytes each" in rules.input_problem(0, torch.float32, 6, NpuTensor(6, 1))
    assert rules.output_problem(2, torch.int8, 5, NpuTensor(6, 1)).startswith(
        "Neutron output 2 is 5 x torch.int8")


# --- a boundary the device would refuse, forced ----------------------------------------------
class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


def _samples(shape, n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(shape, generator=g),) for _ in range(n)]


@pytest.fixture
def input_quantize_in_the_partition(monkeypatch):
    """The partitioner's members made to hold the quantize of the model's input: the
    partition would read the float input itself."""
    members = propose.cluster_members

    def with_input_quantize(analysis):
        found = members(analysis)
        found |= {n for n in analysis.graph.nodes if n.op == "call_function"
                  and n.target in QUANTIZE and n.args[0].op == "placeholder"
                  and not analysis.is_constant(n.args[0])}
        return found

    monkeypatch.setattr(propose, "cluster_members", with_input_quantize)


def _compile(target="corstone-300"):
    torch.manual_seed(0)
    samples = _samples((1, 2, 6, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mcu_npu.compile(Small(), samples[0], target=target, calibration=samples), \
            samples


@pytest.mark.parametrize("target", ["imxrt700", "corstone-300"])
def test_a_quantize_reading_from_outside_its_partition_runs_on_the_cpu(
        input_quantize_in_the_partition, target, monkeypatch):
    """Repaired while partitioning: the CPU quantizes, the partition reads int8, both host
    runtimes run it, the conv stays on the NPU."""
    repair, moved = propose.quantized_on_the_cpu_side, []

    def recorded(members, is_constant):
        kept = repair(members, is_constant)
        moved.extend(n.name for n in members - kept)
        return kept

    monkeypatch.setattr(propose, "quantized_on_the_cpu_side", recorded)
    prog, samples = _compile(target)
    assert moved and all("quantize" in name for name in moved)
    program = Program(prog.buffer, prog.host_data)
    assert io_problems_of(program) == []
    assert prog.report.summary["ops_on_npu"] == prog.report.summary["ops_total"]
    got = prog.run(*samples[1])
    assert torch.equal(got[0], prog.run(*samples[1], runtime="executorch")[0])


def test_a_partition_the_device_would_refuse_moves_to_the_cpu_with_the_reason(
        input_quantize_in_the_partition, monkeypatch):
    """Without that repair the delegated program is checked before it is written: the
    partition whose input would be float moves to the CPU, the report says why."""
    monkeypatch.setattr(propose, "quantized_on_the_cpu_side", lambda members, _: members)
    prog, samples = _compile()
    assert prog.report.summary["ops_on_npu"] == 0
    reasons = [op.reason for op in prog.report.ops if op.op == "aten.convolution"]
    assert reasons and all("the device runtime would refuse its partition: Ethos-U input 0 "
                           "is torch.float32 for a 1-byte NPU input" in r for r in reasons)
    assert io_problems_of(Program(prog.buffer, prog.host_data)) == []
    assert torch.equal(prog.run(*samples[1])[0],
                       prog.run(*samples[1], runtime="executorch")[0])


def test_a_refused_program_is_caught_by_the_same_rule_in_the_check_and_the_runtime(
        input_quantize_in_the_partition, monkeypatch):
    """With both safeguards of the lowering off, the program's own check refuses to return
    it; let through, the host runtime refuses it with the same words."""
    from mcu_npu.flow import check, lower
    from mcu_npu.flow import run as flow

    monkeypatch.setattr(propose, "quantized_on_the_cpu_side", lambda members, _: members)
    monkeypatch.setattr(lower, "refused_partitions", lambda edge, kind: {})
    with pytest.raises(mcu_npu.errors.McuNpuError, match="checking the program's delegate "
                       "tensors.*Ethos-U input 0 is torch.float32 for a 1-byte NPU input"):
        _compile()
    monkeypatch.setattr(check, "io_problems_of", lambda program: [])
    monkeypatch.setattr(flow, "measure", lambda program, *_: program)  # the check's read
    prog, samples = _compile()
    (problem,) = io_problems_of(Program(prog.buffer, prog.host_data))
    rule = ethos_u.FAMILY.input_problem(0, torch.float32, 72, NpuTensor(72, 1))
    assert problem == f"delegate 0 (EthosUBackend): {rule}"
    with pytest.raises(InvalidProgramError) as refused:
        prog.run(*samples[1])
    assert str(refused.value) == rule


# --- the time-series transformer ---------------------------------------------------------------
class TimeSeriesTransformer(nn.Module):
    """Patches of a multichannel series (a strided Conv1d), a class token, a learned
    positional encoding (a parameter added to the tokens), two encoder layers, a linear
    head on the class token."""

    def __init__(self, channels=3, length=32, patch=8, width=16, heads=2, classes=4):
        super().__init__()
        self.patch = nn.Conv1d(channels, width, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, width) * 0.5)
        self.pos = nn.Parameter(torch.randn(1, length // patch + 1, width) * 0.2)
        layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(width, classes)

    def forward(self, x):  # [B, C, L]
        z = self.patch(x).transpose(1, 2)
        z = torch.cat([self.cls.expand(z.shape[0], -1, -1), z], 1) + self.pos
        return self.head(self.encoder(z)[:, 0])


@pytest.fixture(scope="module")
def series_programs():
    """The time-series transformer compiled once per target."""
    torch.manual_seed(0)
    model = TimeSeriesTransformer().eval()
    samples = _samples((1, 3, 32), n=16, seed=1)
    programs = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for target in TARGETS:
            programs[target] = mcu_npu.compile(model, samples[0], target=target,
                                               calibration=samples[:8])
    return model, programs, samples[8:]


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_time_series_transformer_runs_in_both_runtimes_within_contract(series_programs,
                                                                       target):
    model, programs, tests = series_programs
    prog = programs[target]
    assert io_problems_of(Program(prog.buffer, prog.host_data)) == []
    host = [prog.run(*t) for t in tests]  # conftest: each also runs in ExecuTorch's runtime
    with torch.no_grad():
        floats = torch.cat([model(*t).flatten() for t in tests])
        refs = torch.cat([run_exact(prog.reference, *t).flatten().float() for t in tests])
    got = torch.cat([h[0].flatten() for h in host])
    assert sqnr_holds(sqnr_db(floats, got), sqnr_db(floats, refs))
    s = prog.report.summary
    assert (s["ops_on_npu"], s["partitions"]) == (s["ops_total"], 1)


# --- a boundary the Cortex-M lowering breaks after delegation ------------------------------------
def test_a_call_the_cortex_m_lowering_leaves_refused_moves_to_the_cpu(monkeypatch):
    """The delegated program is checked again after the Cortex-M lowering: a partition input
    that lowering leaves float (it dropped the quantize before it) moves the partition to
    the CPU with the reason, and the program compiles instead of failing its own check."""
    from executorch.exir.dialects._ops import ops as exir_ops

    from mcu_npu.flow import lower

    cortex_m = lower.lower_to_cortex_m
    quantize = exir_ops.edge.quantized_decomposed.quantize_per_tensor.default

    def dropping_the_quantize(edge, core):
        for method in edge.methods:
            graph = edge.exported_program(method).graph
            for node in list(graph.nodes):
                if node.target == quantize and any(
                        "executorch_call_delegate" in str(u.target) for u in node.users):
                    node.replace_all_uses_with(node.args[0])
                    graph.erase_node(node)
        return cortex_m(edge, core)

    monkeypatch.setattr(lower, "lower_to_cortex_m", dropping_the_quantize)
    prog, samples = _compile()
    assert prog.report.summary["ops_on_npu"] == 0
    reasons = [op.reason for op in prog.report.ops if op.op == "aten.convolution"]
    assert reasons and all("the device runtime would refuse its partition: Ethos-U input 0 "
                           "is torch.float32 for a 1-byte NPU input" in r for r in reasons)
    assert io_problems_of(Program(prog.buffer, prog.host_data)) == []
    assert torch.equal(prog.run(*samples[1])[0],
                       prog.run(*samples[1], runtime="executorch")[0])


# --- tensors made from an input's shape alone ----------------------------------------------------
class ScaledPatchTransformer(nn.Module):
    """PatchTST's shape: a scaler around the network (HF transformers' NOP scaler: ``scale``
    and ``loc`` are means of ``ones_like`` / ``zeros_like`` of the input), the series cut into
    patches by ``unfold``, a linear patch embedding plus a learned positional parameter, an
    encoder layer, a flatten head, the scaling undone on the forecast. ``spelling`` picks how
    the shape-only tensors are made."""

    def __init__(self, spelling, channels=2, length=32, patch=8, width=16, horizon=4):
        super().__init__()
        self.spelling, self.patch = spelling, patch
        self.embed = nn.Linear(patch, width)
        self.pos = nn.Parameter(torch.randn(1, length // patch, width) * 0.2)
        self.encoder = nn.TransformerEncoderLayer(width, 2, 2 * width, dropout=0.0,
                                                  batch_first=True)
        self.head = nn.Linear(length // patch * width, horizon)

    def forward(self, x):  # [B, L, C]
        b, length, c = x.shape
        if self.spelling == "like":
            scale = torch.ones_like(x).mean(1, keepdim=True)
            loc = torch.zeros_like(x).mean(1, keepdim=True)
        elif self.spelling == "new":
            scale = x.new_ones((b, 1, c)) * 2.0
            loc = x.new_zeros((b, 1, c))
        else:  # full_like, read as it is
            scale = torch.full_like(x[:, :1], 2.0)
            loc = torch.full_like(x[:, :1], 0.5)
        z = ((x - loc) / scale).permute(0, 2, 1).reshape(b * c, length)
        z = self.embed(z.unfold(-1, self.patch, self.patch)) + self.pos
        y = self.head(self.encoder(z).flatten(1)).reshape(b, c, -1).permute(0, 2, 1)
        return y * scale + loc


@pytest.mark.slow
@pytest.mark.parametrize("spelling, target", [("like", "corstone-300"),
                                              ("new", "corstone-320"),
                                              ("full_like", "imxrt700"),
                                              ("full_like", "corstone-300")])
def test_shape_only_tensors_compile_within_the_device_rules_and_contract(spelling, target):
    """Each spelling compiled: before, ExecuTorch's Cortex-M lowering dropped the quantize
    after the CPU's ``ones_like`` and the program's own check failed ('Ethos-U input 1 is
    torch.float32 for a 1-byte NPU input'). Now the tensors are constants (no op makes them at
    run time), the device rules hold, the numerics contract holds."""
    torch.manual_seed(0)
    model = ScaledPatchTransformer(spelling).eval()
    samples = _samples((1, 32, 2), n=16, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = mcu_npu.compile(model, samples[0], target=target, calibration=samples[:8])
    assert io_problems_of(Program(prog.buffer, prog.host_data)) == []
    made_at_run_time = [op.op for op in prog.report.ops if "_like" in op.op or "new_" in op.op]
    assert made_at_run_time == []
    assert prog.report.summary["ops_on_npu"] >= 30  # the encoder and head, one partition
    tests = samples[8:]
    host = [prog.run(*t) for t in tests]
    with torch.no_grad():
        floats = torch.cat([model(*t).flatten() for t in tests])
        refs = torch.cat([run_exact(prog.reference, *t).flatten().float() for t in tests])
    got = torch.cat([h[0].flatten() for h in host])
    assert sqnr_holds(sqnr_db(floats, got), sqnr_db(floats, refs))
