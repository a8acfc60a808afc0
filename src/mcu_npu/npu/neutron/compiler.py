"""The eIQ Neutron adapter: TFLite partition -> NXP's Neutron converter -> runtime payload.

The converter (``eiq_neutron_sdk``, from NXP's eIQ repository, not PyPI) returns a TFLite
model with one CUSTOM "NeutronGraph" op whose last three inputs hold the microcode, weights
and kernels the NPU runs. The payload wraps them in the header the ExecuTorch Neutron runtime
reads (``payload``). The SDK is imported only when compiling.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass

from ai_edge_litert import schema_py_generated as schema

from ...device.delegate_io import neutron_flag
from ...errors import InvalidProgramError, NpuCompilerError
from ...device.payload import pack_reference
from ...targets import NpuKind, Target
from ...device.tflite_model import IOSpec, TFLiteModel
from ...tflite.builder import BUILTIN_NAMES
from .sdk import SDK_INDEX, SDK_MODULE, SDK_PACKAGE
from . import payload as nxp
from ..base import NpuArtifact

TOOL = "eIQ Neutron converter"
MISSING_SDK = (
    f"the eIQ Neutron converter is not installed: package {SDK_PACKAGE!r} (module "
    f"{SDK_MODULE}) comes from NXP's eIQ repository, not from PyPI. Install it with\n"
    f"    pip install --index-url {SDK_INDEX} {SDK_PACKAGE}\n"
    'Meanwhile, compile with npu_compiler="reference".'
)


@dataclass(frozen=True, kw_only=True)
class NeutronOptions:
    """Settings of one converter run; each maps to a field of the SDK's CompilationContext."""

    target: str | None = None
    """The converter's target name ("imxrt700"); None takes the preset's NPU's
    ``vendor_target``, else the preset's name."""
    min_ops_per_graph: int = 1
    exclude_graph_passes: tuple[str, ...] = ("HoistSliceAboveTranspose", "MergeTranspose")
    """Converter passes left out (the ExecuTorch NXP backend's defaults)."""
    fetch_constants_to_sram: bool = False
    """Add microcode that copies weights from flash to SRAM, for models larger than SRAM."""
    use_profiling: bool = False
    """Profiling microcode: two extra outputs (profile, debug), payload version 1."""


def sdk_installed() -> bool:
    """Whether ``eiq_neutron_sdk`` can be imported, without importing it."""
    if SDK_MODULE in sys.modules:
        return sys.modules[SDK_MODULE] is not None
    try:
        return importlib.util.find_spec(SDK_MODULE) is not None
    except (ImportError, ValueError):
        return False


def _import_sdk():
    """(neutron_converter, neutron_library_utils); NpuCompilerError with install help if absent."""
    try:
        from eiq_neutron_sdk import neutron_converter, neutron_library_utils
    except ImportError as exc:  # details only when an installed SDK fails to load
        absent = isinstance(exc, ModuleNotFoundError) and exc.name == SDK_MODULE
        details = "" if absent else str(exc)
        raise NpuCompilerError(MISSING_SDK, tool=TOOL, details=details) from None
    return neutron_converter, neutron_library_utils


def build_context(converter, options: NeutronOptions, target_name: str):
    """The SDK's CompilationContext for ``options``: attribute assignments only."""
    cctx = converter.CompilationContext()
    cctx.targetOpts = converter.getNeutronTarget(target_name)
    opts = cctx.compilationOpts
    opts.minNumOpsPerGraph = options.min_ops_per_graph
    opts.excludeGraphPasses = ",".join(options.exclude_graph_passes)
    opts.fetchConstantsToSRAM = options.fetch_constants_to_sram
    if options.use_profiling:
        if not hasattr(opts, "useProfiling"):
            raise NpuCompilerError("this eiq-neutron-sdk version cannot profile "
                                   "(no compilationOpts.useProfiling)", tool=TOOL)
        opts.useProfiling = True
    return cctx


def run_converter(sdk, tflite: bytes, options: NeutronOptions, target_name: str) -> bytes:
    """One in-process converter run; SDK failures become NpuCompilerError with its message."""
    converter, utils = sdk
    try:
        if not utils.isNeutronTarget(target_name):
            valid = ", ".join(t.name for t in utils.getNeutronTargets())
            raise NpuCompilerError(f"{target_name!r} is not a Neutron converter target; "
                                   f"valid targets: {valid}", tool=TOOL)
        cctx = build_context(converter, options, target_name)
        return bytes(converter.convertModel(list(tflite), cctx))
    except NpuCompilerError:
        raise
    except Exception as exc:
        raise NpuCompilerError(f"the eIQ Neutron converter failed (target {target_name!r})",
                               tool=TOOL, details=f"{type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True)
class NeutronGraph:
    """The converter's NeutronGraph op: its three buffers and IO tensor names in op order."""

    microcode: bytes
    weights: bytes
    kernels: bytes
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    version: int
    """0 when the op's only extra output is the scratch; 1 with profile and debug too."""


def _op_name(model, op) -> str:
    code = model.OperatorCodes(op.OpcodeIndex())
    builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
    custom = builtin == schema.BuiltinOperator.CUSTOM
    return (code.CustomCode() or b"").decode() if custom else BUILTIN_NAMES.get(builtin, "?")


def _buffer(tflite: bytes, model, graph, tensor: int) -> bytes:
    if graph.Tensors(tensor).Type() != schema.TensorType.UINT8:
        raise NpuCompilerError("a NeutronGraph buffer tensor is not uint8", tool=TOOL)
    buf = model.Buffers(graph.Tensors(tensor).Buffer())
    if buf.Offset() > 1:
        return tflite[buf.Offset():buf.Offset() + buf.Size()]
    return b"" if buf.DataIsNone() else buf.DataAsNumpy().tobytes()


def extract_neutron_graph(tflite: bytes) -> NeutronGraph:
    """Microcode, weights, kernels and IO names of the converted model's single NeutronGraph."""
    model = schema.Model.GetRootAs(tflite, 0)
    if model.SubgraphsLength() != 1:
        raise NpuCompilerError(f"converter output has {model.SubgraphsLength()} subgraphs, "
                               "expected 1", tool=TOOL)
    graph = model.Subgraphs(0)
    ops = [graph.Operators(i) for i in range(graph.OperatorsLength())]
    names = [_op_name(model, op) for op in ops]
    if names != ["NeutronGraph"]:
        raise NpuCompilerError(f"converter output has ops {names}, expected exactly one "
                               "NeutronGraph: the converter kept part of the partition off "
                               "the NPU", tool=TOOL)
    op = ops[0]
    ins = [op.Inputs(i) for i in range(op.InputsLength())]
    outs = [op.Outputs(i) for i in range(op.OutputsLength())]
    graph_ins = {graph.Inputs(i) for i in range(graph.InputsLength())}
    graph_outs = {graph.Outputs(i) for i in range(graph.OutputsLength())}
    version = {1: 0, 3: 1}.get(len(outs) - len(graph_outs))
    if len(ins) < 3 or version is None:
        raise NpuCompilerError(f"NeutronGraph has {len(ins)} inputs, {len(outs)} outputs for "
                               f"{len(graph_outs)} graph outputs: expected 3 buffer inputs, "
                               "1 or 3 extra outputs", tool=TOOL)
    buffers, ins, outs = ins[-3:], ins[:-3], outs[:len(graph_outs)]
    if not set(ins) <= graph_ins or set(outs) != graph_outs:
        raise NpuCompilerError("NeutronGraph IO tensors differ from the graph's IO", tool=TOOL)
    microcode, weights, kernels = (_buffer(tflite, model, graph, t) for t in buffers)
    return NeutronGraph(microcode, weights, kernels,
                        tuple(graph.Tensors(t).Name().decode() for t in ins),
                        tuple(graph.Tensors(t).Name().decode() for t in outs), version)


def runtime_format(spec: IOSpec) -> int:
    """Header format flag of one partition input / output: the flag under which the Neutron
    runtime hands the NPU the tensor in the partition graph's layout ``spec.perm``."""
    rank = len(spec.shape)
    dim_order = spec.dim_order if spec.dim_order is not None else tuple(range(rank))
    try:
        return int(neutron_flag(spec.shape, dim_order, spec.perm, spec.name))
    except InvalidProgramError as exc:
        raise NpuCompilerError(str(exc), tool=TOOL) from None


def _positions(names: tuple[str, ...], partition: list[str], kind: str) -> tuple[int, ...]:
    """Where each NeutronGraph tensor sits among the partition's inputs or outputs, by name."""
    for name in names:
        if partition.count(name) != 1:
            raise NpuCompilerError(f"NeutronGraph {kind} {name!r} matches "
                                   f"{partition.count(name)} partition {kind}s {partition}",
                                   tool=TOOL)
    return tuple(partition.index(n) for n in names)


def payload_fields(model: TFLiteModel, graph: NeutronGraph) -> nxp.NeutronPayload:
    """Header fields: the converter's IO order mapped onto the partition's, by tensor name."""
    sub = schema.Model.GetRootAs(model.buffer, 0).Subgraphs(0)
    in_names = [sub.Tensors(s.index).Name().decode() for s in model.inputs]
    out_names = [sub.Tensors(s.index).Name().decode() for s in model.outputs]
    in_map = _positions(graph.input_names, in_names, "input")
    out_map = _positions(graph.output_names, out_names, "output")
    if sorted(out_map) != list(range(len(model.outputs))):
        raise NpuCompilerError("NeutronGraph does not produce every partition output", tool=TOOL)
    return nxp.NeutronPayload(
        num_input_args=len(model.inputs),
        input_formats=tuple(runtime_format(model.inputs[j]) for j in in_map),
        output_formats=tuple(runtime_format(model.outputs[j]) for j in out_map),
        input_map=in_map, output_map=out_map, version=graph.version,
        microcode=graph.microcode, weights=graph.weights, kernels=graph.kernels)


def checked_payload(fields: nxp.NeutronPayload) -> tuple[bytes, nxp.MicrocodeInfo]:
    """The payload bytes, after the checks the runtime makes when it loads them."""
    try:
        info = nxp.microcode_info(fields.microcode, fields.version)
        if (nxp.align(info.microcode_size), nxp.align(info.weights_size)) != \
                (nxp.align(len(fields.microcode)), nxp.align(len(fields.weights))):
            raise ValueError(
                f"microcode size words ({info.microcode_size}, {info.weights_size} bytes) "
                f"disagree with the NeutronGraph buffers ({len(fields.microcode)}, "
                f"{len(fields.weights)} bytes): the runtime would look for the weights in the "
                "wrong place")
        blob = nxp.compose(fields)
        nxp.parse(blob)
    except (ValueError, InvalidProgramError) as exc:
        raise NpuCompilerError("the converter's output does not form a payload the Neutron "
                               "runtime accepts", tool=TOOL, details=str(exc)) from None
    return blob, info


class NeutronCompiler:
    """Compiles a partition with NXP's eIQ Neutron converter into the Neutron runtime payload."""

    name = "neutron"

    def __init__(self, options: NeutronOptions | None = None):
        self.options = options or NeutronOptions()

    def available(self) -> bool:
        return sdk_installed()

    def compile(self, model: TFLiteModel, target: Target) -> NpuArtifact:
        if target.npu.kind is not NpuKind.NEUTRON:
            raise NpuCompilerError(f"target {target.name!r} has a {target.npu.kind} NPU; the "
                                   "Neutron converter compiles for eIQ Neutron only", tool=TOOL)
        target_name = self.options.target or target.npu.vendor_target or target.name
        converted = run_converter(_import_sdk(), model.buffer, self.options, target_name)
        graph = extract_neutron_graph(converted)
        payload, info = checked_payload(payload_fields(model, graph))
        # flash: the whole payload; SRAM: the buffers the runtime allocates for each run
        run_buffers = (info.scratch_size, info.profile_size, info.debug_size,
                       info.sram_scratch_size)
        host = pack_reference(model, {"compiler": self.name, "target": target.name})
        return NpuArtifact(self.name, payload, {
            "npu_flash_bytes": len(payload), "npu_sram_bytes": sum(run_buffers),
            "microcode_bytes": len(graph.microcode), "weights_bytes": len(graph.weights),
            "kernels_bytes": len(graph.kernels), "payload_version": graph.version}, host)
