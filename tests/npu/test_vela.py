"""VelaCompiler, the Ethos-U bin stream and vela_rejections, against the installed Vela.

Partitions come from the project's converter. Vela's own estimates, placement decisions and
error messages are the expected values; the upstream ExecuTorch Arm packer
(``arm_vela.vela_compile``, which runs the ``vela`` command) is the oracle for the payload
bytes.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
import tempfile

import pytest
import torch
from helpers import convert_module

from mcu_npu.errors import InvalidProgramError, NpuCompilerError
from mcu_npu.npu.ethos_u import payload as bin_stream
from mcu_npu.npu.ethos_u.vela import VelaCompiler, VelaOptions
from mcu_npu.npu.ethos_u.vela_run import KEEP_TEMPS, architecture, build_call
from mcu_npu.npu.ethos_u.vela_support import vela_rejections
from mcu_npu.graph.macs import node_macs
from mcu_npu.targets import NpuKind, Target, get_target, targets
from mcu_npu.tflite.ops_aliases import aten

pytest.importorskip("ethosu.vela")
U55, U85 = get_target("ethos-u55-128"), get_target("ethos-u85-256")


class ConvRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


class Depthwise(torch.nn.Module):
    def __init__(self, stride=1):
        super().__init__()
        self.pre = torch.nn.Conv2d(8, 8, 1)
        self.dw = torch.nn.Conv2d(8, 8, 4 if stride > 3 else 3, stride=stride, padding=0 if
                                  stride > 3 else 1, groups=8)

    def forward(self, x):
        return self.dw(self.pre(x))


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


MODELS = {
    "conv_relu": (ConvRelu, ((1, 3, 16, 16),)),
    "depthwise": (Depthwise, ((1, 8, 16, 16),)),
    "linear": (lambda: torch.nn.Linear(32, 16), ((1, 32),)),
    "add": (Add, ((1, 8, 8, 8), (1, 8, 8, 8))),
}


@pytest.fixture(scope="module")
def converted():
    """name -> (TFLiteModel, MACs of the Edge graph), converted once for the module."""
    out = {}
    for name, (make, shapes) in {**MODELS, "dw_stride4": (lambda: Depthwise(4),
                                                          ((1, 8, 16, 16),))}.items():
        torch.manual_seed(0)
        _, model, edge = convert_module(make(), tuple(torch.randn(s) for s in shapes))
        graph = edge.exported_program().graph
        out[name] = (model, sum(node_macs(n) for n in graph.nodes if n.op == "call_function"),
                     graph)
    return out


@pytest.mark.parametrize("target", [U55, U85], ids=lambda t: t.name)
@pytest.mark.parametrize("name", MODELS)
def test_stats_are_vela_estimates(converted, name, target):
    model, macs, _ = converted[name]
    stats = VelaCompiler().compile(model, target).stats
    assert stats["npu_cycles"] > 0 and stats["macs"] == macs
    assert stats["npu_sram_bytes"] > 0 and stats["scratch_bytes"] > 0
    assert stats["clock_hz"] == target.npu.clock_hz
    assert stats["macs_per_cycle"] == target.npu.macs_per_cycle
    assert stats["inference_time_us"] == pytest.approx(
        stats["total_cycles"] / target.npu.clock_hz * 1e6, abs=1e-3)
    if macs:  # Vela never estimates more MACs per cycle than the hardware has
        assert stats["mac_bound_ratio"] == pytest.approx(
            stats["npu_cycles"] / (macs / target.npu.macs_per_cycle), rel=1e-3)
        assert stats["mac_bound_ratio"] >= 1
    else:
        assert "mac_bound_ratio" not in stats


@pytest.mark.parametrize("target", [U55, U85], ids=lambda t: t.name)
@pytest.mark.parametrize("name", MODELS)
def test_payload_is_a_runtime_bin_stream(converted, name, target):
    model, _, _ = converted[name]
    art = VelaCompiler().compile(model, target)
    blob = art.payload
    assert len(blob) % 16 == 0 and art.stats["npu_flash_bytes"] == len(blob)
    found, at = [], 0
    for block, _, data in bin_stream.blocks(blob):
        assert at % 16 == 0
        found.append(block)
        at += 32 + bin_stream.align(len(data))
    assert found == list(bin_stream.BLOCKS)
    stream = bin_stream.parse(blob)
    assert stream.cmd_data[:4] in (b"COP1", b"COP2")
    assert stream.scratch_size == art.stats["scratch_bytes"]
    assert [torch.Size(io.shape).numel() for io in stream.inputs] == \
        [torch.Size(s.shape).numel() for s in model.inputs]
    assert all(len(io.shape) == 6 and io.elem_size == 1 for io in stream.inputs + stream.outputs)
    assert bin_stream.compose(stream) == blob


@pytest.mark.parametrize("target", [U55, U85, get_target("ethos-u65-256")],
                         ids=lambda t: t.name)
def test_payload_equals_upstream_packer(converted, target):
    arm_vela = pytest.importorskip("executorch.backends.arm.arm_vela")
    model, _, _ = converted["conv_relu"]
    vela = target.npu.vela
    flags = [f"--accelerator-config={vela.accelerator}", f"--config={vela.config_file}",
             "--output-format=raw", f"--system-config={vela.system_config}",
             f"--memory-mode={vela.memory_mode}"]
    with contextlib.redirect_stdout(io.StringIO()):
        upstream = arm_vela.vela_compile(model.buffer, flags)
    assert VelaCompiler().compile(model, target).payload == upstream.processed_bytes


def test_parse_refuses_what_the_runtime_refuses():
    io_ = bin_stream.VelaIO((1, 1, 1, 4, 4, 8), 1, 0, 1)
    good = bin_stream.compose(bin_stream.VelaBinStream(
        cmd_data=b"COP1" + bytes(12), weight_data=b"w", scratch_size=128, inputs=(io_,),
        outputs=(io_,)))
    assert bin_stream.parse(good).scratch_size == 128
    bad_magic = good.replace(b"COP1", b"COPX")
    external = bytearray(good)
    external[32 + 20] = 1  # external flag of cmd_data
    swapped = good[:32] + good[80:128] + good[32:80] + good[128:]  # weights first
    for blob, message in ((bad_magic, "COP1"), (bytes(external), "external"),
                          (good[:-32], "blocks are"), (swapped, "blocks are"),
                          (good[:-8], "multiple of 16")):
        with pytest.raises(InvalidProgramError, match=message):
            bin_stream.parse(blob)
    with pytest.raises(ValueError, match="6-D"):
        bin_stream.compose(bin_stream.VelaBinStream(
            cmd_data=b"COP1", weight_data=b"", scratch_size=0,
            inputs=(bin_stream.VelaIO((4, 8), 1, 0, 1),), outputs=()))
    assert struct.unpack_from("<I", good, 48)[0] == 16  # cmd_data size, unpadded


@pytest.mark.parametrize("name", MODELS)
def test_no_rejections_for_supported_ops(converted, name):
    model, _, _ = converted[name]
    assert vela_rejections(model, U55) == {} and vela_rejections(model, U85) == {}


def test_rejection_names_the_node_and_gives_velas_reason(converted):
    model, _, graph = converted["dw_stride4"]
    (dw,) = [n.name for n in graph.nodes if n.target == aten.convolution.default and
             n.args[8] == 8]
    assert vela_rejections(model, U55) == {dw: "Unsupported kernel stride: 4, 4; Kernel "
                                               "stride must be in the range (1,3)."}
    assert vela_rejections(model, U85) == {}  # the U85 runs stride 4 depthwise convolutions


class Overflow(torch.nn.Module):
    """A feature map of range about 1e15: its int8 scale (about 1e13) is beyond what Regor's
    scale and shift hold, a check Regor reports without naming the operator."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)) * 1e15)


def test_reason_vela_gives_without_naming_the_operator():
    torch.manual_seed(0)
    _, model, edge = convert_module(Overflow(), (torch.randn(1, 3, 16, 16),))
    names = [n.name for n in edge.exported_program().graph.nodes]
    mul, conv = (next(n for n in names if n.startswith(op))
                 for op in ("aten_mul_tensor", "aten_convolution_default_1"))
    reason = ("Vela: Quantization scale of any tensor must be positive. (given for the "
              "partition, not per operator)")
    assert vela_rejections(model, U85) == {mul: reason, conv: reason}


def test_compile_error_names_the_node_vela_leaves_to_the_cpu(converted):
    model, _, graph = converted["dw_stride4"]
    with pytest.raises(NpuCompilerError, match="without passthrough/CPU operations") as err:
        VelaCompiler().compile(model, U55)
    assert err.value.tool == "vela" and "Kernel stride must be in the range (1,3)" in str(
        err.value)
    assert [n.name for n in graph.nodes if n.name in str(err.value)]


def _with_vela(**changes) -> Target:
    from dataclasses import replace

    return replace(U55, npu=replace(U55.npu, vela=replace(U55.npu.vela, **changes)))


@pytest.mark.parametrize("changes, message", [
    ({"accelerator": "ethos-u55-999"}, "unknown Ethos-U accelerator configuration"),
    ({"system_config": "Nope"}, "Section System_Config.Nope not found in Vela config file"),
    ({"memory_mode": "Dedicated_Sram"},  # the U55 cannot put its arena in flash
     r"Invalid configuration of arena_mem_area=OffChipFlash \(must be Sram or Dram\)"),
    ({"config_file": "Nowhere/none.ini"}, "configuration file 'Nowhere/none.ini' not found"),
])
def test_unusable_configuration_raises_velas_message(converted, changes, message):
    with pytest.raises(NpuCompilerError, match=message) as err:
        VelaCompiler().compile(converted["add"][0], _with_vela(**changes))
    assert err.value.tool == "vela"


def test_model_vela_cannot_read_raises_its_message(converted):
    model, _, _ = converted["add"]
    broken = type(model)(b"\x18\0\0\0TFL3" + bytes(40), model.inputs, model.outputs)
    with pytest.raises(NpuCompilerError, match="Failed to Parse TFLite file"):
        VelaCompiler().compile(broken, U55)
    with pytest.raises(NpuCompilerError, match="not a TFLite flatbuffer"):  # Regor would crash
        VelaCompiler().compile(type(model)(b"garbage", model.inputs, model.outputs), U55)


def test_bad_option_and_foreign_target_raise(converted):
    model, _, _ = converted["add"]
    with pytest.raises(NpuCompilerError, match="VelaOptions.cop_format='COP9'; valid: COP1, COP2"):
        VelaCompiler(VelaOptions(cop_format="COP9")).compile(model, U55)
    with pytest.raises(NpuCompilerError, match="Vela compiles for Arm Ethos-U only"):
        VelaCompiler().compile(model, get_target("imxrt700"))


def test_keep_temps_keeps_velas_inputs(converted, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model, _, _ = converted["dw_stride4"]
    with pytest.raises(NpuCompilerError):
        VelaCompiler().compile(model, U55)
    assert os.listdir(tmp_path) == []
    monkeypatch.setenv(KEEP_TEMPS, "1")
    with pytest.raises(NpuCompilerError) as err:
        VelaCompiler().compile(model, U55)
    kept = str(err.value).rsplit("Vela inputs kept in ", 1)[1].strip()
    assert os.path.dirname(kept) == str(tmp_path)
    assert sorted(os.listdir(kept)) == ["compiler_options.ini", "network.tflite",
                                        "system_config.ini", "vela_output.txt"]
    with open(os.path.join(kept, "network.tflite"), "rb") as f:
        assert f.read() == model.buffer


def test_call_text_and_presets_agree_with_vela():
    options = VelaOptions()
    for name in targets():
        target = get_target(name)
        if target.npu.kind is not NpuKind.ETHOS_U:
            continue
        arch = architecture(target.npu.vela, options)
        call = build_call(arch, options)
        assert (call.clock_hz, call.macs_per_cycle) == \
            (target.npu.clock_hz, target.npu.macs_per_cycle), name
        assert f"memory_mode_name={target.npu.vela.memory_mode}" in call.system_config
        assert "output_format=Raw" in call.compiler_options
    assert get_target("ethos-u65-512").npu.macs_per_cycle == 512  # two 256-MAC cores
