"""The backends' ``preprocess``: Edge partition -> TFLite int8 -> NPU compiler -> payload.

ExecuTorch finds a backend by class name, and upstream's Arm and NXP backends define classes
named like the device runtimes' ids, so these classes (one per NPU family, ``backend_for``)
carry names of their own and ``DeviceBackendIds`` writes the device id
(``NpuFamily.backend_id``: ``NeutronBackend``, ``EthosUBackend``) into the lowered modules
afterwards; a vendor payload then runs on the device runtime unchanged, and importing an
upstream backend in the same process cannot take over this project's
partitions. A vendor payload's TFLite graph is kept for the host emulator as external named
data, under a key derived from the payload (``device.payload.host_graph_key``): it goes to
the companion file, not into the device program.
"""

from __future__ import annotations

import functools
import linecache
import types

import torch

from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.lowered_backend_module import LoweredBackendModule
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from executorch.exir.pass_manager import ExportedProgramPassManager
from torch.export import ExportedProgram
from torch.export.exported_program import ModuleCallEntry, ModuleCallSignature
from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec,
                                          OutputKind, OutputSpec, TensorArgument)
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from ..upstream.private import (FakeTensorMode, NamedDataStore, TrainingIRVerifier,
                                extract_tensor_metadata, pytree, set_backend_id,
                                set_original_program)
from .boundary import NPU_IO
from .compile_spec import NpuCompileSpec
from ..errors import (ConversionError, McuNpuError, NpuCompilerError,
                     PartitionError, first_line)
from ..npu.compilers import get_compiler
from ..device.payload import HOST_DATA_TAG, host_graph_key, unpack_reference
from .debug_handles import delegate_debug_map, npu_op_nodes
from ..npu import families
from ..targets import get_target
from ..tflite import convert
from ..tflite.describe import op_names
from ..graph.ids import node_id


def npu_preprocess(edge_program: ExportedProgram, compile_specs) -> PreprocessResult:
    spec = NpuCompileSpec.from_compile_specs(compile_specs)
    target = get_target(spec.target).placed(spec.memory)
    compiler = get_compiler(spec.npu_compiler, target)
    try:
        model = convert(edge_program, target)
        artifact = compiler.compile(model, target)
    except (ConversionError, NpuCompilerError) as exc:
        raise PartitionError(first_line(exc), nodes=compute_nodes(edge_program)) from exc
    except McuNpuError:
        raise
    except Exception as exc:  # noqa: BLE001  (a vendor compiler raises any type)
        raise PartitionError(f"{type(exc).__name__}: {first_line(exc)}",
                             nodes=compute_nodes(edge_program)) from exc
    graph = host_graph_of(artifact)
    host = graph.buffer
    op_nodes = npu_op_nodes(edge_program, host, model.op_origins, compute_nodes(edge_program))
    info = {
        "compiler": artifact.compiler,
        "stats": op_cycles(dict(artifact.stats), op_nodes),
        "tflite_ops": op_names(model.buffer),
        "tflite_bytes": len(model.buffer),
        NPU_IO: families.family(target.npu.kind).npu_tensors(artifact.payload, graph),
    }
    debug_map = delegate_debug_map(edge_program, host, model.op_origins,
                                   compute_nodes(edge_program))
    store = None
    if artifact.host_graph is not None:
        named = NamedDataStore()
        named.add_named_data(host_graph_key(artifact.payload, artifact.host_graph),
                             artifact.host_graph, external_tag=HOST_DATA_TAG)
        store = named.get_named_data_store_output()
    return PreprocessResult(processed_bytes=artifact.payload, data_store_output=store,
                            debug_handle_map=debug_map, _delegate_info_meta=info)


def op_cycles(stats: dict, op_nodes: dict) -> dict:
    """``stats`` with the NPU compiler's per-layer cycles (``layer_cycles``: TFLite operator
    index -> cycles) given per compute op: ``op_cycles`` (ATen node id -> cycles, the first
    op of an operator taking its cycles, an op fused into it none) and ``other_cycles``
    (operators the converter added: boundary transposes, reshapes)."""
    layers = stats.pop("layer_cycles", None)
    if not layers:
        return stats
    per_op: dict[str, int] = {}
    other = 0
    graph = next((ns[0].graph for ns in op_nodes.values() if ns), None)
    order = {n: i for i, n in enumerate(graph.nodes)} if graph is not None else {}
    for index, cycles in sorted(layers.items()):
        # the graph's order puts the op first and an activation fused after it later
        nodes = sorted(op_nodes.get(index, []), key=order.get)
        idents = [i for i in dict.fromkeys(map(node_id, nodes)) if i]
        if idents:
            per_op[idents[0]] = per_op.get(idents[0], 0) + cycles
            for ident in idents[1:]:
                per_op.setdefault(ident, 0)
        else:
            other += cycles
    return {**stats, "op_cycles": per_op, "other_cycles": other}


def host_graph_of(artifact):
    """The TFLite graph behind an NPU artifact: the kept host graph, or the payload itself
    (a reference payload)."""
    return unpack_reference(artifact.host_graph if artifact.host_graph is not None
                            else artifact.payload)[0]


_BACKENDS: dict[str, type[BackendDetails]] = {}
"""This project's backend classes by class name, one per NPU family, made by ``backend_for``."""


def backend_for(kind) -> type[BackendDetails]:
    """The backend that compiles partitions for a ``kind`` NPU: a ``BackendDetails`` named
    ``NpuFamily.backend_class_name`` (ExecuTorch finds a backend by its class name), made once
    per family, whose ``device_id`` is the family's device runtime id."""
    family = families.family(kind)
    backend = _BACKENDS.get(family.backend_class_name)
    if backend is None:
        backend = type(family.backend_class_name, (BackendDetails,), {
            "__doc__": f"Partitions for {family.kind} NPUs (device id {family.backend_id}).",
            "__module__": __name__, "device_id": family.backend_id,
            "preprocess": staticmethod(npu_preprocess)})
        _BACKENDS[backend.__name__] = backend
    return backend


COMPUTE_NODES = "mcu_npu_compute_nodes"
"""The key of a lowered module's ``meta`` naming its partition's compute nodes, kept when its
graph is replaced by its interface (``keep_interfaces_only``)."""


def compute_nodes(partition: ExportedProgram) -> tuple[str, ...]:
    """Names of the compute nodes of a partition (its calls other than quantize, dequantize
    and tuple access): the nodes of the delegating program they were cut from."""
    from ..tflite.ops_aliases import DEQUANTIZE, DEQUANTIZE_PER_CHANNEL, QUANTIZE

    skip = {*QUANTIZE, *DEQUANTIZE, *DEQUANTIZE_PER_CHANNEL}
    return tuple(n.name for n in partition.graph.nodes
                 if n.op == "call_function" and n.target not in skip
                 and getattr(n.target, "__name__", "") != "getitem")


def use_device_ids(exported_program: ExportedProgram) -> bool:
    """Rename this project's lowered modules in place to the device runtimes' backend ids;
    True if any was renamed."""
    renamed = False
    for module in exported_program.graph_module.modules():
        if isinstance(module, LoweredBackendModule) and module.backend_id in _BACKENDS:
            set_backend_id(module, _BACKENDS[module.backend_id].device_id)
            renamed = True
    return renamed


class _Outputs(torch.nn.Module):
    """Zeros shaped and strided like a delegate's outputs: all ExecuTorch still needs of its
    graph (the strides give the output tensors their dim order in the .pte, which the
    payload's boundary layout was chosen for)."""

    def __init__(self, outputs: list[Interface], as_tuple: bool):
        super().__init__()
        self.outputs, self.as_tuple = outputs, as_tuple

    def forward(self, *inputs):
        outs = tuple(torch.empty_strided(shape, stride, dtype=dtype).zero_()
                     for shape, stride, dtype in self.outputs)
        return outs if self.as_tuple else outs[0]


def keep_interfaces_only(exported_program: ExportedProgram) -> None:
    """Replace each lowered module's copy of its partition graph by a graph that only makes
    outputs of the right shapes.

    After delegation ExecuTorch runs that graph on fake tensors whenever a pass meets the
    delegate call (shape propagation, every pass of ``to_executorch``) and deep-copies it
    with the program; for an unrolled recurrent network that is thousands of nodes each
    time. The payload is already built, so only the interface matters. The delegate's
    debug-handle map stays: it is the lowered module's metadata, not its graph's, and so do
    the names of the partition's compute nodes (``COMPUTE_NODES``), to move it to the CPU
    should a later lowering leave its call one the device refuses.
    """
    for module in exported_program.graph_module.modules():
        if not isinstance(module, LoweredBackendModule):
            continue
        original = module.original_module
        module.meta = {**(module.meta or {}), COMPUTE_NODES: compute_nodes(original)}
        out = original.graph.output_node().args[0]
        as_tuple = isinstance(out, (list, tuple))
        vals = [n.meta["val"] for n in (out if as_tuple else [out])]
        user = set(original.graph_signature.user_inputs)
        inputs = tuple(torch.empty_strided(n.meta["val"].shape, n.meta["val"].stride(),
                                           dtype=n.meta["val"].dtype).zero_()
                       for n in original.graph.nodes if n.op == "placeholder" and n.name in user)
        outputs = [(tuple(v.shape), tuple(v.stride()), v.dtype) for v in vals]
        set_original_program(module, interface_program(inputs, outputs, as_tuple)
                             or torch.export.export(_Outputs(outputs, as_tuple), inputs))


def interface_program(inputs: tuple[torch.Tensor, ...], outputs: list[Interface],
                      as_tuple: bool) -> ExportedProgram | None:
    """The program ``torch.export.export(_Outputs(outputs, as_tuple), inputs)`` gives, made
    directly (a trace takes 15-25 ms of CPU per delegate, this 3-5 ms): the inputs as placeholders named
    after ``forward``'s ``*inputs``, per output an ``empty_strided`` and its ``zero_`` with
    the metadata the trace gives them, every value fake in one mode. None, for the trace
    to make, without outputs or with a symbolic size."""
    if not outputs or not all(type(d) is int for shape, stride, _ in outputs
                              for d in (*shape, *stride)):
        return None
    mode = FakeTensorMode(shape_env=ShapeEnv(tracked_fakes=[]), allow_non_fake_inputs=True,
                          export=True)
    graph = torch.fx.Graph()
    specs = []
    for k, x in enumerate(inputs):
        node = graph.placeholder(f"inputs_{k}")
        node.meta["val"] = mode.from_tensor(x, static_shapes=True)
        node.meta["tensor_meta"] = extract_tensor_metadata(node.meta["val"])
        specs.append(InputSpec(InputKind.USER_INPUT, TensorArgument(node.name), None))
    results = []
    for k, (shape, stride, dtype) in enumerate(outputs, start=1):
        with mode:
            val = torch.empty_strided(shape, stride, dtype=dtype)
        empty = graph.create_node(
            "call_function", torch.ops.aten.empty_strided.default, (list(shape), list(stride)),
            {"dtype": dtype, "device": torch.device("cpu"), "pin_memory": False},
            name="empty_strided")
        zero = graph.create_node("call_function", torch.ops.aten.zero_.default, (empty,),
                                 name="zero_")
        for node, fn in ((empty, f"empty_strided_{k}"), (zero, f"zero__{k}")):
            with mode:
                node.meta["val"] = val.detach()  # what the trace keeps of a traced value
            node.meta.update(nn_module_stack={"L__self__": ("", _OUTPUTS_NAME)},
                             stack_trace=_outputs_stack_trace(),
                             torch_fn=(fn, _TORCH_FN[node.target]),
                             tensor_meta=extract_tensor_metadata(node.meta["val"]))
        results.append(zero)
    graph.output(tuple(results))
    signature = ExportGraphSignature(
        specs, [OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(z.name), None)
                for z in results])
    call = ModuleCallEntry("", ModuleCallSignature(
        inputs=[], outputs=[], in_spec=pytree.tree_structure((inputs, {})),
        out_spec=pytree.tree_structure(tuple(results) if as_tuple else results[0]),
        forward_arg_names=[n.name for n in graph.nodes if n.op == "placeholder"]))
    program = ExportedProgram(root=torch.nn.Module(), graph=graph, graph_signature=signature,
                              state_dict={}, range_constraints={}, module_call_graph=[call],
                              example_inputs=(inputs, {}), verifiers=[TrainingIRVerifier])
    program.graph_module.meta["inline_constraints"] = {}
    return program


Interface = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]
"""A tensor's shape, strides and dtype."""

_OUTPUTS_NAME = f"{_Outputs.__module__}.{_Outputs.__qualname__}"
_TORCH_FN = {torch.ops.aten.empty_strided.default: "builtin_function_or_method.empty_strided",
             torch.ops.aten.zero_.default: "method_descriptor.zero_"}
"""The ``torch_fn`` a trace of ``_Outputs`` records for each op: the Python callable's type
and name."""


@functools.cache
def _outputs_stack_trace() -> str:
    """The stack trace a trace records for ``_Outputs``'s ops: the ``forward`` line that
    makes the outputs (where its generator expression starts)."""
    code = next(c for c in _Outputs.forward.__code__.co_consts
                if isinstance(c, types.CodeType))
    line = linecache.getline(code.co_filename, code.co_firstlineno).strip()
    return f'File "{code.co_filename}", line {code.co_firstlineno}, in forward\n    {line}'


class DeviceBackendIds(ExportedProgramPassBase):
    """``use_device_ids`` as a pass, for pipelines such as ExecuTorch recipes."""

    def call(self, exported_program: ExportedProgram):
        return ExportedProgramPassResult(exported_program, use_device_ids(exported_program))


def device_id_passes() -> ExportedProgramPassManager:
    """``EdgeProgramManager.transform`` argument applying ``DeviceBackendIds``; run it after
    every other pass (the last step before ``to_executorch``)."""
    return ExportedProgramPassManager([DeviceBackendIds()])
