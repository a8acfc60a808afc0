"""NeutronCompiler against a test double of the eIQ Neutron SDK (``zoo.neutron_sdk_double``).

The double stands in for NXP's converter; these tests check what this project owns: the
converter call, the NeutronGraph extraction, the payload bytes the device runtime reads and
the errors. Where the upstream ExecuTorch NXP backend imports, its PayloadComposer is the
oracle for the payload bytes.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from zoo.neutron_sdk_double import MAGIC, Behaviour, install

from mcu_npu.errors import NpuCompilerError
from mcu_npu.npu import ReferenceCompiler, get_compiler
from mcu_npu.npu.neutron import payload as nxp
from mcu_npu.npu.neutron.compiler import NeutronCompiler, NeutronOptions, runtime_format
from mcu_npu.targets import get_target
from mcu_npu.tflite import IOSpec, TFLiteModel
from mcu_npu.tflite.builder import ModelBuilder

TARGET = get_target("imxrt700")
NCHW = (0, 2, 3, 1)


def spec(name, shape, perm, index=0) -> IOSpec:
    return IOSpec(name=name, index=index, shape=shape, perm=perm, dtype="int8", scale=0.05,
                  zero_point=0, quantized_outside=True)


def partition(inputs, outputs) -> TFLiteModel:
    """A TFLite graph declaring only IO tensors (the double does not read ops)."""
    b = ModelBuilder()
    specs = []
    for name, shape, perm in inputs + outputs:
        tflite_shape = [shape[p] for p in perm]
        specs.append(spec(name, shape, perm, b.add_tensor(name, tflite_shape, np.int8,
                                                          scale=0.05, zero_point=0)))
    ins, outs = specs[:len(inputs)], specs[len(inputs):]
    b.set_io([s.index for s in ins], [s.index for s in outs])
    return TFLiteModel(b.finish(), tuple(ins), tuple(outs))


MIXED = partition([("image", (1, 3, 8, 8), NCHW), ("vector", (1, 16), (0, 1))],
                  [("feature", (1, 4, 8, 8), NCHW), ("logits", (1, 10), (0, 1))])


def compile_with(monkeypatch, behaviour=None, options=None, model=MIXED):
    behaviour = behaviour or Behaviour()
    install(monkeypatch, behaviour)
    return NeutronCompiler(options).compile(model, TARGET), behaviour


def test_payload_layout_and_runtime_words(monkeypatch):
    art, b = compile_with(monkeypatch)
    blob = art.payload
    header = blob[:12]  # 4 + 2 * 2 inputs + 2 * 2 outputs
    assert list(header) == [2, 2, 2, 1, 0, 1, 0, 0, 1, 0, 1, 0]
    assert blob[12:16] == bytes(4)
    words = struct.unpack_from("<8I", blob, 16)
    assert (words[0], words[6], words[7]) == (MAGIC, b.microcode_size, b.weights_size)
    weights_at = 16 + nxp.align(b.microcode_size)
    kernels_at = weights_at + nxp.align(b.weights_size)
    assert (weights_at, kernels_at) == (128, 176)
    assert len(blob) == kernels_at + nxp.align(b.kernels_size) and len(blob) % 16 == 0
    assert blob[16 + b.microcode_size:weights_at] == bytes(weights_at - 16 - b.microcode_size)
    parsed = nxp.parse(blob)
    assert len(parsed.weights) == b.weights_size and parsed.kernels[b.kernels_size:] == bytes(11)
    assert art.stats == {"npu_flash_bytes": len(blob), "npu_sram_bytes": b.scratch_size,
                         "microcode_bytes": 100, "weights_bytes": 37, "kernels_bytes": 5,
                         "payload_version": 0}


def test_compose_parse_round_trip():
    micro = struct.pack("<13I", MAGIC, 0, 0, 0, 0, 0, 52, 3, 0, 64, 0, 1, 1)
    fields = nxp.NeutronPayload(num_input_args=2, input_formats=(1,), output_formats=(0,),
                                input_map=(1,), output_map=(0,), version=0,
                                microcode=micro, weights=b"abc", kernels=b"k" * 16)
    assert nxp.parse(nxp.compose(fields)) == fields


@pytest.mark.parametrize("shape, perm, flag", [
    ((1, 3, 8, 8), NCHW, nxp.CHANNELS_LAST),
    ((1, 3, 8, 8), (0, 1, 2, 3), nxp.FORMATLESS),
    ((1, 1, 8, 8), NCHW, nxp.FORMATLESS),  # one channel: same bytes either way
    ((4, 16), (0, 1), nxp.FORMATLESS),
    # 3-D: the runtime takes sizes[0] as the channels and writes (H, W, C) = perm (1, 2, 0)
    ((2, 4, 8), (1, 2, 0), nxp.CHANNELS_LAST),
    ((2, 4, 8), (0, 1, 2), nxp.FORMATLESS),
])
def test_runtime_format(shape, perm, flag):
    assert runtime_format(spec("t", shape, perm)) == flag


@pytest.mark.parametrize("shape, perm", [
    ((1, 4, 8), (0, 2, 1)),  # conv1d layout: sizes[0] == 1, so the flag transposes nothing
    ((2, 4, 8), (0, 2, 1)),  # the flag gives (1, 2, 0), never (0, 2, 1)
    ((4, 16), (1, 0)),  # the runtime refuses to transpose below rank 3
])
def test_runtime_format_rejects_layouts_the_runtime_cannot_deliver(shape, perm):
    with pytest.raises(NpuCompilerError, match="no Neutron format flag delivers layout"):
        runtime_format(spec("seq", shape, perm))


def test_maps_follow_converter_io_order(monkeypatch):
    art, _ = compile_with(monkeypatch, Behaviour(reverse_inputs=True, reverse_outputs=True))
    p = nxp.parse(art.payload)
    assert (p.input_map, p.input_formats) == ((1, 0), (0, 1))
    assert (p.output_map, p.output_formats) == ((1, 0), (0, 1))
    assert p.num_input_args == 2


def test_profiling_gives_payload_version_1(monkeypatch):
    art, b = compile_with(monkeypatch, options=NeutronOptions(use_profiling=True))
    assert b.calls[-1].compilationOpts.useProfiling is True
    p = nxp.parse(art.payload)
    info = nxp.microcode_info(p.microcode, p.version)
    assert p.version == 1 and art.payload[11] == 1  # last header byte
    assert (info.profile_size, info.debug_size, info.num_inputs, info.num_outputs) == \
        (256, 64, 2, 2)
    assert art.stats["npu_sram_bytes"] == b.scratch_size + 256 + 64


def test_options_reach_the_compilation_context(monkeypatch):
    _, b = compile_with(monkeypatch, options=NeutronOptions(fetch_constants_to_sram=True))
    cctx = b.calls[-1]
    assert cctx.targetOpts.name == "imxrt700"
    assert cctx.compilationOpts.minNumOpsPerGraph == 1
    assert cctx.compilationOpts.excludeGraphPasses == "HoistSliceAboveTranspose,MergeTranspose"
    assert cctx.compilationOpts.fetchConstantsToSRAM is True


def test_the_converter_target_is_the_npu_specs(monkeypatch):
    """MCX N947's NPU is 'mcxn94x' to the converter (NpuSpec.vendor_target), not the preset
    name; an explicit NeutronOptions.target still wins."""
    from zoo import neutron_sdk_double

    monkeypatch.setattr(neutron_sdk_double, "TARGETS", ("imxrt700", "mcxn94x"))
    b = Behaviour()
    install(monkeypatch, b)
    NeutronCompiler().compile(MIXED, get_target("mcxn947"))
    NeutronCompiler(NeutronOptions(target="imxrt700")).compile(MIXED, get_target("mcxn947"))
    assert [c.targetOpts.name for c in b.calls] == ["mcxn94x", "imxrt700"]


def test_sdk_absent(monkeypatch):
    monkeypatch.setitem(sys.modules, "eiq_neutron_sdk", None)
    assert not NeutronCompiler().available()
    assert isinstance(get_compiler("auto", TARGET), ReferenceCompiler)
    with pytest.raises(NpuCompilerError) as err:
        NeutronCompiler().compile(MIXED, TARGET)
    msg = str(err.value)
    assert "eiq-neutron-sdk" in msg and "not from PyPI" in msg
    assert "pip install --index-url https://eiq.nxp.com/repository eiq-neutron-sdk" in msg
    assert 'npu_compiler="reference"' in msg


def test_sdk_present_is_picked_by_auto(monkeypatch):
    install(monkeypatch, Behaviour())
    assert NeutronCompiler().available()
    assert isinstance(get_compiler("auto", TARGET), NeutronCompiler)


def test_sdk_exception_is_wrapped(monkeypatch):
    with pytest.raises(NpuCompilerError, match="Unsupported op: GATHER") as err:
        compile_with(monkeypatch, Behaviour(fail="Unsupported op: GATHER"))
    assert err.value.tool == "eIQ Neutron converter"
    assert "RuntimeError" in err.value.details


def test_unknown_converter_target(monkeypatch):
    with pytest.raises(NpuCompilerError, match="valid targets: imxrt700"):
        compile_with(monkeypatch, options=NeutronOptions(target="imx95"))


def test_size_words_that_disagree_with_buffers(monkeypatch):
    with pytest.raises(NpuCompilerError, match="wrong place"):
        compile_with(monkeypatch, Behaviour(size_word_override=200))


UPSTREAM_CASES = [
    (Behaviour(), None),
    (Behaviour(reverse_inputs=True, reverse_outputs=True), None),
    (Behaviour(), NeutronOptions(use_profiling=True)),
]


def compare_with_upstream() -> str:
    """Byte-for-byte check against upstream's PayloadComposer (run in a child process,
    so upstream's NXP modules and their registrations stay out of the test run)."""
    monkeypatch = pytest.MonkeyPatch()
    install(monkeypatch, Behaviour())
    try:
        from executorch.backends.nxp.backend.data_format import DataFormat as fmt
        from executorch.backends.nxp.nxp_backend import PayloadComposer
    except Exception as exc:  # upstream layout changed or extra deps missing
        return f"SKIP executorch.backends.nxp does not import: {exc}"
    composer = PayloadComposer()
    for behaviour, options in UPSTREAM_CASES:
        art, b = compile_with(monkeypatch, behaviour, options)
        converted = bytes(sys.modules["eiq_neutron_sdk"].neutron_converter.convertModel(
            list(MIXED.buffer), b.calls[-1]))

        def formats(specs):
            return {s.name: fmt.CHANNELS_LAST if s.perm == NCHW else fmt.FORMATLESS
                    for s in specs}

        io_formats = {"inputs": formats(MIXED.inputs), "outputs": formats(MIXED.outputs)}
        if art.payload != composer.get_binary_payload(io_formats, converted):
            return f"MISMATCH for {behaviour}, {options}"
    return "OK"


def test_payload_matches_upstream_composer():
    here = Path(__file__).resolve().parent
    paths = [str(here), str(here.parent), str(here.parent.parent / "benchmarks")]
    code = (f"import sys; sys.path[:0] = {paths!r}\n"
            "import test_neutron; print(test_neutron.compare_with_upstream())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    result = (r.stdout.strip().splitlines() or [r.stderr.strip()[-500:]])[-1]
    if result.startswith("SKIP"):
        pytest.skip(result[5:])
    assert result == "OK", r.stderr[-2000:]


def test_converted_torch_partition(monkeypatch):
    """A partition from the real TFLite converter: IO found by tensor name, NCHW flagged."""
    torch = pytest.importorskip("torch")
    from helpers import convert_module

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU())
    _, model, _ = convert_module(net, (torch.randn(1, 3, 8, 8),))
    art, _ = compile_with(monkeypatch, model=model)
    p = nxp.parse(art.payload)
    assert (p.input_formats, p.output_formats, p.input_map, p.output_map) == \
        ((1,), (1,), (0,), (0,))
