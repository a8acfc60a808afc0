"""The private names of ExecuTorch, torch and torchao that mcu-npu reads, in one table
(``PRIVATE``), and the private attributes it sets, by the functions below.

Code outside ``upstream/`` imports such a name from here (``from ..upstream.private import
NamedDataStore``), never from its private module: each is found when first asked for, so
nothing heavy loads with this module, and an upgrade that moves or renames one fails here
(``tests/test_upstream_patches.py`` resolves every entry) rather than in the module that uses
it. Written against ``patches.WRITTEN_AGAINST``; the patches that change upstream behaviour
are in ``patches``.
"""

from __future__ import annotations

import importlib

PRIVATE = {
    # ExecuTorch: its program files, named data and Edge dialect
    "deserialize_pte_binary": "executorch.exir._serialize._program:deserialize_pte_binary",
    "NamedDataStore": "executorch.exir._serialize._named_data_store:NamedDataStore",
    "DataEntry": "executorch.exir._serialize.data_serializer:DataEntry",
    "DataPayload": "executorch.exir._serialize.data_serializer:DataPayload",
    "run_flatc": "executorch.exir._serialize._flatbuffer:_run_flatc",
    "bundled_program_file_identifier":
        "executorch.devtools.bundled_program.serialize:_bundled_program_file_identifier",
    "bundled_program_to_flatbuffer":
        "executorch.devtools.bundled_program.serialize:_bundled_program_schema_to_flatbuffer",
    "exir_ops": "executorch.exir.dialects._ops:ops",
    "EdgeOpOverload": "executorch.exir.dialects.edge._ops:EdgeOpOverload",
    "transform_program": "executorch.exir.program._program:_transform",
    "lift_constant_tensor_pass": "executorch.exir.program._program:lift_constant_tensor_pass",
    "default_decomposition_table": "executorch.exir.tracer:_default_decomposition_table",
    "get_updated_graph_signature": "executorch.exir._program_utils:_get_updated_graph_signature",
    # torch: fake tensors, pytrees, export's verifier and shape metadata
    "FakeTensor": "torch._subclasses.fake_tensor:FakeTensor",
    "FakeTensorMode": "torch._subclasses.fake_tensor:FakeTensorMode",
    "in_kernel_invocation_manager":
        "torch._subclasses.fake_tensor:in_kernel_invocation_manager",
    "detect_fake_mode": "torch._guards:detect_fake_mode",
    "make_contiguous_strides_for": "torch._prims_common:make_contiguous_strides_for",
    "ELEMENTWISE_TYPE_PROMOTION_KIND": "torch._prims_common:ELEMENTWISE_TYPE_PROMOTION_KIND",
    "elementwise_dtypes": "torch._prims_common:elementwise_dtypes",
    "get_view_copy_of_view_op":
        "torch._export.passes.replace_view_ops_with_view_copy_ops_pass:get_view_copy_of_view_op",
    "pytree": "torch.utils._pytree",
    "TrainingIRVerifier": "torch._export.verifier:TrainingIRVerifier",
    "extract_tensor_metadata": "torch.fx.passes.shape_prop:_extract_tensor_metadata",
    "quantized_decomposed_ops": "torch.ao.quantization.fx._decomposed",
    # torchao
    "fuse_conv_bn": "torchao.quantization.pt2e.utils:_fuse_conv_bn_",
}
"""Name here -> ``module:attribute`` (or a module) it stands for."""


def resolve(name: str):
    """The upstream object ``PRIVATE[name]`` names, imported now."""
    module, _, attribute = PRIVATE[name].partition(":")
    found = importlib.import_module(module)
    return getattr(found, attribute) if attribute else found


def __getattr__(name: str):
    if name not in PRIVATE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = resolve(name)
    globals()[name] = value
    return value


def set_backend_id(lowered, backend_id: str) -> None:
    """Rename a ``LoweredBackendModule``'s backend (its ``backend_id`` has no setter)."""
    lowered._backend_id = backend_id


def set_original_program(lowered, program) -> None:
    """Replace the partition program a ``LoweredBackendModule`` keeps."""
    lowered._original_exported_program = program


def set_graph_signature(program, signature) -> None:
    """Replace an ``ExportedProgram``'s graph signature in place (no setter either)."""
    program._graph_signature = signature


def set_pytree_calling(graph_module, in_spec, out_spec) -> None:
    """Make a ``GraphModule`` take its inputs and return its outputs as the pytrees
    ``in_spec`` and ``out_spec`` say: its graph's code generator (torch.fx's
    ``_PyTreeCodeGen``) and, where it has one, torch.export's input check (``_in_spec``)."""
    from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo

    names = [n.name for n in graph_module.graph.nodes if n.op == "placeholder"]
    graph_module.graph._codegen = _PyTreeCodeGen(_PyTreeInfo(names, in_spec, out_spec))
    if hasattr(graph_module, "_in_spec"):
        graph_module._in_spec, graph_module._out_spec = in_spec, out_spec


def copy_calling(source, graph) -> None:
    """Give ``graph`` the calling form (pytree code generator) of graph ``source``."""
    import copy

    graph._codegen = copy.deepcopy(source._codegen)
