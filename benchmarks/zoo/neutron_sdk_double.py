"""TEST DOUBLE of NXP's ``eiq_neutron_sdk`` (the eIQ Neutron converter). Not the real SDK.

It offers the API the ExecuTorch NXP backend calls:
``neutron_converter.CompilationContext()`` (``.targetOpts``, ``.compilationOpts``),
``neutron_converter.getNeutronTarget(name)``, ``neutron_converter.convertModel(list[int], cctx)``,
``neutron_library_utils.isNeutronTarget(name)`` and ``neutron_library_utils.getNeutronTargets()``.
``convertModel`` takes a TFLite model and returns a TFLite model whose only op is a CUSTOM
"NeutronGraph": inputs = the graph inputs + microcode, weights, kernels (uint8 constants);
outputs = the graph outputs + scratch (+ profile, debug when profiling). The microcode is
synthetic: word[0] is the magic 0x64434D6E, word[6] / word[7] the microcode / weights sizes,
and the scratch and IO-count words sit where the device runtime reads them. Nothing is compiled.
"""

from __future__ import annotations

import struct
import sys
import types
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from mcu_npu.tflite.builder import NUMPY_TYPES, ModelBuilder

MAGIC = 0x64434D6E
TARGETS = ("imxrt700",)


@dataclass
class Behaviour:
    """How the double converts: sizes, IO order, failures. Tests set it per case."""

    microcode_size: int = 100
    weights_size: int = 37
    kernels_size: int = 5
    scratch_size: int = 4096
    reverse_inputs: bool = False
    """NeutronGraph reads the graph inputs in reverse order (graph input order is kept)."""
    reverse_outputs: bool = False
    fail: str | None = None
    """When set, convertModel raises RuntimeError with this message."""
    size_word_override: int | None = None
    calls: list = field(default_factory=list)


def microcode(b: Behaviour, n_in: int, n_out: int, version: int) -> bytes:
    words = [0] * (b.microcode_size // 4)
    words[0], words[6], words[7], words[9] = MAGIC, b.microcode_size, b.weights_size, b.scratch_size
    if b.size_word_override is not None:
        words[6] = b.size_word_override
    if version == 0:
        words[11], words[12] = n_in, n_out
    else:
        words[10], words[11] = 0x80000000 | 256, 64  # profile (top bit is a flag), debug
        words[13], words[14] = n_in, n_out
    body = struct.pack(f"<{len(words)}I", *words)
    return body + bytes(range(b.microcode_size - len(body)))


def _copy_tensor(builder: ModelBuilder, t) -> int:
    q = t.quantization
    return builder.add_tensor(t.name.decode(), list(t.shape), NUMPY_TYPES[t.type],
                              scale=None if q is None or q.scale is None else list(q.scale),
                              zero_point=None if q is None else list(q.zeroPoint))


def convert(b: Behaviour, tflite: bytes, profiling: bool) -> bytes:
    model = schema.ModelT.InitFromPackedBuf(tflite, 0)
    graph = model.subgraphs[0]
    out = ModelBuilder("neutron-double")
    ins = [_copy_tensor(out, graph.tensors[i]) for i in graph.inputs]
    outs = [_copy_tensor(out, graph.tensors[i]) for i in graph.outputs]
    version = 1 if profiling else 0
    rng = np.random.default_rng(0)
    buffers = [
        out.add_tensor("microcode", [b.microcode_size], np.uint8,
                       data=np.frombuffer(microcode(b, len(ins), len(outs), version), np.uint8)),
        out.add_tensor("weights", [b.weights_size], np.uint8,
                       data=rng.integers(1, 255, b.weights_size, dtype=np.uint8)),
        out.add_tensor("kernels", [b.kernels_size], np.uint8,
                       data=rng.integers(1, 255, b.kernels_size, dtype=np.uint8)),
    ]
    extras = [out.add_tensor("scratch", [b.scratch_size], np.uint8)]
    if profiling:
        extras += [out.add_tensor(n, [64], np.uint8) for n in ("profile", "debug")]
    op_ins = ins[::-1] if b.reverse_inputs else ins
    op_outs = outs[::-1] if b.reverse_outputs else outs
    out.add_operator(schema.BuiltinOperator.CUSTOM, op_ins + buffers, op_outs + extras,
                     custom="NeutronGraph")
    out.set_io(ins, outs)
    return out.finish()


def make_sdk(b: Behaviour) -> types.ModuleType:
    """The fake ``eiq_neutron_sdk`` package with its two submodules."""
    target = SimpleNamespace(name="imxrt700", npu=SimpleNamespace(
        subsystem=False, hwVersion=2, numUnits=4, numPipes=4, numMacs=16))

    def get_target(name):
        if name not in TARGETS:
            raise RuntimeError(f"unknown target {name}")
        return SimpleNamespace(name=name, npu=target.npu)

    def compilation_context():
        opts = SimpleNamespace(minNumOpsPerGraph=0, excludeGraphPasses="",
                               fetchConstantsToSRAM=False, dumpKernelSelectionCode=False,
                               useProfiling=False)
        return SimpleNamespace(targetOpts=None, compilationOpts=opts)

    def convert_model(data, cctx):
        b.calls.append(cctx)
        if b.fail:
            raise RuntimeError(b.fail)
        return list(convert(b, bytes(data), cctx.compilationOpts.useProfiling))

    pkg = types.ModuleType("eiq_neutron_sdk")
    pkg.__path__ = []
    pkg.neutron_converter = types.ModuleType("eiq_neutron_sdk.neutron_converter")
    pkg.neutron_converter.__dict__.update(
        CompilationContext=compilation_context, getNeutronTarget=get_target,
        convertModel=convert_model)
    pkg.neutron_library_utils = types.ModuleType("eiq_neutron_sdk.neutron_library_utils")
    pkg.neutron_library_utils.__dict__.update(
        isNeutronTarget=lambda name: name in TARGETS, getNeutronTargets=lambda: [target])
    return pkg


def install(monkeypatch, b: Behaviour) -> types.ModuleType:
    """Put the double into sys.modules for one test (monkeypatch undoes it)."""
    pkg = make_sdk(b)
    for mod in (pkg, pkg.neutron_converter, pkg.neutron_library_utils):
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return pkg
