"""Where mcu-npu reaches into ExecuTorch or torch beyond their public API, in one place.

Written against **executorch 1.5.1**, **torch 2.13** and **torchao 0.18** (``WRITTEN_AGAINST``). Each entry
says what it relies on, why no supported way exists in those versions, and what would let
it go; ``tests/test_upstream_patches.py`` exercises each one and checks the upstream
attribute or behaviour it relies on, so an upgrade that changes it fails there first.

* ``edge_program_from_core_aten`` -- ``to_edge`` for a program decomposed already (no
  object is patched: it calls ExecuTorch's private ``_generate_edge_program``, which is
  what ``to_edge`` runs after decomposing).
* ``restrict_cortex_m_quantizer`` -- limits ``CortexMQuantizer``'s pattern quantizers to
  some nodes by wrapping their ``node_finder`` attribute.
* ``cortex_m_activation_observers`` -- gives ``CortexMQuantizer``'s per-tensor activation
  specs another observer by replacing their pattern quantizers' ``quantization_config``.
* ``import_cortex_m_ops`` -- imports ExecuTorch's Cortex-M reference ops when their
  packages' optional Arm/TOSA imports fail, by entering those packages in ``sys.modules``
  without running their ``__init__``.
* ``conv_bn_rewrites_where_they_match`` -- runs torchao's QAT conv + BatchNorm pattern
  rewrites (``_fuse_conv_bn_qat``, ``_fold_conv_bn_qat``) only on graphs where a
  convolution feeds a BatchNorm, by swapping the names ``quantize_pt2e`` calls them by
  (its tests: ``tests/quantization/test_conv_bn_rewrite_guard.py``).
* ``pattern_graphs_traced_once`` -- traces each of torchao's QAT rewrite patterns (conv +
  BatchNorm, BatchNorm and dropout train/eval) once per process, with a non-strict export,
  and hands out copies, by swapping the name its rewrites call the tracer by.
* ``observer_names_in_linear_time`` -- gives ``prepare_pt2e``'s observers the names it
  gives them, without re-testing every taken name for each new observer, by swapping the
  name factory ``torch.ao.quantization.fx.prepare`` calls.
* ``to_executorch_without_idle_dim_order_pass`` -- ``to_executorch`` without
  ``LegalizePortableDimOrderPass`` on programs holding none of the ops it rewrites, by
  setting the Edge compile config's ``_skip_dim_order`` for the call.
* ``cia_ops_collected_once`` -- ``run_decompositions`` gets torch's set of preservable
  CompositeImplicitAutograd ops computed once per state of the dispatcher's registrations,
  by swapping the name ``torch.export`` modules call ``_collect_all_valid_cia_ops`` by.
* ``validation_deferred`` -- ``ExportedProgram`` construction and pass-manager checks skip
  the verifiers within a block whose result the caller validates once, by swapping
  ``ExportedProgram.validate``.
* ``module_calls_unwound_on_error`` -- a module call that raises during non-strict
  ``torch.export`` leaves the tracer's module stack as it found it, by wrapping
  ``torch.fx.Tracer.call_module``.
* ``graph_code_on_first_use`` -- generates a ``GraphModule``'s Python code when it is first
  used, not on each ``recompile``, by swapping ``GraphModule.recompile`` and giving pending
  modules' own classes members that generate it.

``COMPILE_WIDE`` lists the patches whose block is a whole compile (``compile_patches``,
entered once by ``flow.run``) and says why each other one keeps a narrower block.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from torch.fx import GraphModule, Node
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.graph import _PyTreeCodeGen

WRITTEN_AGAINST = {"executorch": "1.5.1", "torch": "2.13", "torchao": "0.18"}

_OURS = "_mcu_npu_patch"


def _ours(fn):
    """``fn``, marked as a replacement a block of this module installs (``_installed``)."""
    setattr(fn, _OURS, True)
    return fn


def _installed(owner, name: str) -> bool:
    """``owner.name`` is a replacement a block of this module installed: a nested block of
    the same patch (``quantize``'s inside ``compile_patches``) leaves it as it is, and the
    outer block restores the original."""
    return getattr(getattr(owner, name), _OURS, False)


# --- to_edge without its decomposition re-trace ---------------------------------------------
def edge_program_from_core_aten(ep, config):
    """The ``EdgeProgramManager`` ``to_edge(ep, compile_config=config)`` gives, for an ``ep``
    already decomposed with ``to_edge``'s table (``flow.edge.core_aten_program``).

    What: runs ``executorch.exir.program._program._generate_edge_program`` -- the step
    ``to_edge`` runs after ``program.run_decompositions(table)`` -- and wraps the result as
    ``to_edge`` does. With ``config._check_ir_validity`` False (``flow.edge``'s config),
    ``to_edge`` does nothing else.

    Why: ``run_decompositions`` always re-traces the whole program on fake tensors, even
    when no op in it decomposes, and an unrolled recurrent graph holds thousands of nodes.
    ``to_edge`` has no argument to skip it (nor has ``to_edge_transform_and_lower``, whose
    ``run_decompositions({})`` re-traces too), and torch has no short cut for an empty
    decomposition. This replaced assigning ``ep.run_decompositions = lambda ...: ep`` before
    calling ``to_edge``. It goes when ``to_edge`` can take a decomposed program as it is.
    """
    from executorch.exir import EdgeProgramManager
    from executorch.exir.program._program import _generate_edge_program

    edge = _generate_edge_program(config, ep, preserve_ops=list(config.preserve_ops))
    return EdgeProgramManager({"forward": edge}, None, config)


# --- to_executorch without a dim-order re-trace that finds nothing -------------------------------
def to_executorch_without_idle_dim_order_pass(edge):
    """``edge.to_executorch()`` (an ``EdgeProgramManager``), where no graph of ``edge``
    holds an op ``LegalizePortableDimOrderPass`` rewrites, without that pass.

    What: ``to_executorch`` runs the pass unless ``edge.compile_config._skip_dim_order``,
    and reads that config for nothing else; the config is swapped for a copy with the flag
    set during the call, then put back.

    Why: the pass is an ``ExportPass``: it re-traces every node on fake tensors (delegate
    calls included) to put a contiguous copy before five ops (``_target_ops``) whose input
    is in another dim order. Without those ops it changes nothing, and ``SpecPropPass``,
    next, re-traces the graph anyway: the skipped trace is about a tenth of the compile of
    a small model whose ops all run on the NPU. ``ExecutorchBackendConfig`` has no way to
    leave one pass out. It goes when the pass checks for its ops before re-tracing.
    """
    from executorch.exir.passes.legalize_portable_dim_order_pass import (
        LegalizePortableDimOrderPass,
    )

    config = edge.compile_config
    targets = LegalizePortableDimOrderPass._target_ops
    if config._skip_dim_order or any(
            node.op == "call_function" and node.target in targets
            for method in edge.methods
            for module in edge.exported_program(method).graph_module.modules()
            if isinstance(module, GraphModule) for node in module.graph.nodes):
        return edge.to_executorch()
    import dataclasses

    edge.compile_config = dataclasses.replace(config, _skip_dim_order=True)
    try:
        return edge.to_executorch()
    finally:
        edge.compile_config = config


# --- torch's CompositeImplicitAutograd op set collected once -------------------------------------
_CIA_OPS: dict = {}
"""``cia_ops_collected_once``'s op sets, by ``_registrations``."""


def _registrations() -> tuple:
    """What the set of preservable CIA ops is made from: the op namespaces, the ops with a
    CompositeImplicitAutograd kernel in the C++ dispatcher and the number of its ops (about
    5 ms, against about 110 ms for the set)."""
    import torch

    return (tuple(torch.ops._dir),
            tuple(torch._C._dispatch_get_registrations_for_dispatch_key(
                "CompositeImplicitAutograd")),
            len(torch._C._dispatch_get_all_op_names()))


@contextmanager
def cia_ops_collected_once():
    """Within the block, ``ExportedProgram.run_decompositions`` gets the set of preservable
    CompositeImplicitAutograd (CIA) ops from a cache keyed by ``_registrations``, as a copy.

    What: replaces ``_collect_all_valid_cia_ops`` in ``torch.export.exported_program`` and
    ``torch.export.decomp_utils`` (the names ``run_decompositions`` and
    ``CustomDecompTable.materialize`` call; both import it from ``torch._export.utils``) by a
    function that computes it once per key, then restores them.

    Why: for every op namespace but ``aten`` (some 40 with ExecuTorch and torchao loaded) the
    function looks up every CIA op of every namespace again, about 110 ms, and each
    ``run_decompositions`` calls it twice: a compile whose graph needs decomposing (a
    ``matmul``, a ``t``) decomposes twice, so about 0.45 s of its CPU. torch does not cache
    it because custom-op libraries can register CIA kernels later; the key changes with any
    new namespace, C++ CIA registration or op. A Python-only CIA kernel (``py_impl``) added
    to an op that already exists is the one change the key does not see. A nested block
    leaves it installed. It goes when torch caches the set itself.
    """
    import torch.export.decomp_utils as decomp_utils
    import torch.export.exported_program as exported_program
    from torch._export.utils import _collect_all_valid_cia_ops

    if _installed(exported_program, "_collect_all_valid_cia_ops"):
        yield
        return

    @_ours
    def cached():
        key = _registrations()
        if key not in _CIA_OPS:
            _CIA_OPS.clear()
            _CIA_OPS[key] = frozenset(_collect_all_valid_cia_ops())
        return set(_CIA_OPS[key])

    saved = exported_program._collect_all_valid_cia_ops, decomp_utils._collect_all_valid_cia_ops
    exported_program._collect_all_valid_cia_ops = decomp_utils._collect_all_valid_cia_ops = cached
    try:
        yield
    finally:
        exported_program._collect_all_valid_cia_ops, decomp_utils._collect_all_valid_cia_ops = \
            saved


# --- ExportedProgram verification deferred to the end of a pass sequence ---------------------
_VALIDATION = threading.local()


@contextmanager
def validation_deferred():
    """Within the block, ``ExportedProgram.validate`` does nothing: the verifiers do not run
    when a program is built (``ExportedProgram.__init__`` calls ``validate``) or checked by
    a pass manager. The caller validates what the block produces, once, after it.

    What: replaces ``torch.export.ExportedProgram.validate`` by a no-op, then restores it;
    nested blocks replace it once. ``_validate`` (which it calls) stays.

    Why: ``_transform`` validates the program before and after each pass and builds a new,
    validated one when a pass changed it; a sequence of n passes validates it 2n times or
    more, each walking every node, for the one program that leaves the sequence. Only
    where the checks happen moves: a pass leaving an invalid program still fails, at the
    end of the sequence rather than at that pass. It goes when ExportedProgram can be
    built without running its verifiers.
    """
    from torch.export import ExportedProgram

    depth = getattr(_VALIDATION, "depth", 0)
    if depth == 0:
        _VALIDATION.saved = ExportedProgram.validate
        ExportedProgram.validate = lambda self: None
    _VALIDATION.depth = depth + 1
    try:
        yield
    finally:
        _VALIDATION.depth = depth
        if depth == 0:
            ExportedProgram.validate = _VALIDATION.saved


# --- the Cortex-M quantizer on a subset of nodes ---------------------------------------------
NodeFilter = Callable[[Node], bool]


class FilteredNodeFinder:
    """A node finder that yields only the nodes ``keep`` accepts from another finder."""

    def __init__(self, inner, keep: NodeFilter):
        self.inner = inner
        self.keep = keep

    def find_nodes(self, model: GraphModule) -> Iterator[Node]:
        return (n for n in self.inner.find_nodes(model) if self.keep(n))

    def __repr__(self) -> str:
        return f"{self.inner!r}, restricted to the CPU's nodes"


def restrict_cortex_m_quantizer(quantizer, keep: NodeFilter):
    """``quantizer`` (a ``CortexMQuantizer``) with each of its pattern quantizers finding
    only the nodes ``keep`` accepts; returns ``quantizer``.

    What: replaces the ``node_finder`` attribute of every sub-quantizer that has one (the
    ``PatternQuantizer`` for convolutions, ``NodeTargetNodeFinder``, and the one for the
    other ops, ``GlobalNodeFinder``) by a ``FilteredNodeFinder`` around it.
    ``PatternQuantizer.annotate`` reads ``self.node_finder.find_nodes(model)``.

    Why: ``CortexMQuantizer.__init__`` builds its node finders itself and takes none (its
    only arguments are ``per_tensor_config`` and ``use_explicit_layout``). Building the
    pattern quantizers ourselves needs ``executorch.backends.arm`` classes, which mcu-npu
    must not import. Upstream's own exclusion mark, ``quantizer_matched`` in a node's meta
    (set on the NPU's nodes by ``composed.TargetQuantizer``), is not the same: the finder
    still yields the skipped nodes, so placeholders and the output node get Cortex-M
    annotations, and an NPU node between two CPU nodes in graph order breaks a pattern
    (conv + relu) the CPU nodes form. It goes when the quantizer takes a node filter.
    """
    for sub in quantizer.quantizers:
        finder = getattr(sub, "node_finder", None)
        if finder is not None:
            sub.node_finder = FilteredNodeFinder(finder, keep)
    return quantizer


def cortex_m_activation_observers(quantizer, observer_ctr: Callable):
    """``quantizer`` (a ``CortexMQuantizer``) with the per-tensor activation specs of its
    pattern quantizers' configs observed by ``observer_ctr(spec)`` (a constructor for the
    spec's dtype, range and scheme); returns ``quantizer``.

    What: replaces the ``quantization_config`` attribute of every sub-quantizer that has
    one by a copy (``dataclasses.replace``; the configs are frozen dataclasses) whose
    ``input_activation`` / ``output_activation``, when a per-tensor ``QuantizationSpec``,
    carry the new observer. The config's own adjustments (softmax's fixed parameters, the
    pools' shared specs) are methods of its class and stay.

    Why: the configs are module constants (``INT8_PER_CHANNEL_CONFIG`` with a
    ``HistogramObserver``) and ``CortexMQuantizer.__init__`` takes only the per-tensor one;
    the convolutions' config cannot be given. It goes when the quantizer takes its configs.
    """
    import dataclasses

    import torch
    from torchao.quantization.pt2e.quantizer import QuantizationSpec

    def swap(spec):
        if not isinstance(spec, QuantizationSpec) or spec.qscheme not in (
                torch.per_tensor_affine, torch.per_tensor_symmetric):
            return spec
        return dataclasses.replace(spec, observer_or_fake_quant_ctr=observer_ctr(spec))

    for sub in quantizer.quantizers:
        config = getattr(sub, "quantization_config", None)
        if config is not None:
            sub.quantization_config = dataclasses.replace(
                config, input_activation=swap(config.input_activation),
                output_activation=swap(config.output_activation))
    return quantizer


# --- the Cortex-M reference ops without the Arm/TOSA stack -----------------------------------
CORTEX_M_OPS = "executorch.backends.cortex_m.ops.operators"
# Package __init__s on the import path of the Cortex-M ops that pull the optional Arm/TOSA stack:
# ops.operators imports cortex_m.passes.passes_utils (the passes package's __init__ imports
# every pass, and through them the Arm backend) and cortex_m.quantizer.quantization_configs
# (which imports arm.quantizer.*; arm.quantizer's __init__ imports the TOSA quantizers).
CORTEX_M_HEAVY_PACKAGES = ("executorch.backends.cortex_m.passes",
                           "executorch.backends.cortex_m.quantizer",
                           "executorch.backends.arm.quantizer")


def import_cortex_m_ops() -> None:
    """Import ExecuTorch's Cortex-M reference ops (registering ``torch.ops.cortex_m``), with or
    without a working Arm/TOSA stack.

    What: tries a plain import first. If that fails, it forgets the half-imported Cortex-M
    modules, enters each package of ``CORTEX_M_HEAVY_PACKAGES`` not imported yet in
    ``sys.modules`` as a bare module (its ``__init__`` not run, so its submodules still
    import from its directory), imports the ops, then removes the bare packages again, so a
    later real import of them runs their ``__init__``.

    Why: the ops module needs only two light helper modules, but they sit in packages whose
    ``__init__`` imports the whole Arm backend and the TOSA tools, optional dependencies
    the host runtime does not otherwise need (ImportError without them; AttributeError
    with some versions of them). Neither ExecuTorch nor torch offers another way to
    register the ``cortex_m`` ops (no prebuilt op library ships with the wheel). It goes
    when ``executorch.backends.cortex_m.ops`` imports without those packages.
    """
    before = set(sys.modules)
    try:
        importlib.import_module(CORTEX_M_OPS)
        return
    except Exception:  # ImportError without the TOSA tools; AttributeError with some versions
        for name in set(sys.modules) - before:
            if name.startswith("executorch.backends.cortex_m"):
                del sys.modules[name]
    bare = {}
    for name in CORTEX_M_HEAVY_PACKAGES:
        if name not in sys.modules:
            bare[name] = importlib.util.module_from_spec(importlib.util.find_spec(name))
            sys.modules[name] = bare[name]
    try:
        importlib.import_module(CORTEX_M_OPS)
    finally:
        for name, module in bare.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


# --- torchao's conv + BatchNorm pattern rewrites where a pattern can match ---------------------
def conv_feeds_batch_norm(graph) -> bool:
    """A BatchNorm of ``graph`` reads a convolution's output directly or through the ``/ scale``
    and ``+ bias`` of torchao's QAT conv + BN pattern: the only graphs its rewrites change."""
    import torch
    from torchao.quantization.pt2e.utils import _is_bn_node, _is_conv_or_conv_transpose_node

    steps = (torch.ops.aten.div.Tensor, torch.ops.aten.add.Tensor)
    for node in graph.nodes:
        if not _is_bn_node(node):
            continue
        x = node.args[0]
        for _ in range(len(steps) + 1):
            if not isinstance(x, Node):
                break
            if _is_conv_or_conv_transpose_node(x):
                return True
            if x.op != "call_function" or x.target not in steps:
                break
            x = x.args[0]
    return False


@contextmanager
def conv_bn_rewrites_where_they_match():
    """Within the block, ``prepare_qat_pt2e`` and ``convert_pt2e`` run their conv + BatchNorm
    pattern rewrites only on a graph where ``conv_feeds_batch_norm``.

    What: replaces ``torchao.quantization.pt2e.quantize_pt2e._fuse_conv_bn_qat`` and
    ``._fold_conv_bn_qat`` (the names ``prepare_qat_pt2e`` and ``convert_pt2e`` call) by
    functions that return the graph module untouched unless a convolution feeds a
    BatchNorm, then restores them.

    Why: both rewrites start as soon as the graph holds any BatchNorm, and each traces its
    match and replacement patterns with ``torch.export`` for every variant (conv1d, conv2d,
    transposed; per-channel or not; bias or not; training or not): 96 exports, 10 to 45 s,
    in every ``convert_pt2e``, PTQ included, even for a BatchNorm no convolution feeds,
    where nothing can match. torchao takes no argument to skip them. A nested block leaves
    them installed. It goes when torchao checks for a conv -> BatchNorm chain before
    tracing its patterns.
    """
    from torchao.quantization.pt2e import quantize_pt2e

    if _installed(quantize_pt2e, "_fuse_conv_bn_qat"):
        yield
        return
    fuse, fold = quantize_pt2e._fuse_conv_bn_qat, quantize_pt2e._fold_conv_bn_qat

    def guarded(rewrite):
        return _ours(lambda m: rewrite(m) if conv_feeds_batch_norm(m.graph) else m)

    quantize_pt2e._fuse_conv_bn_qat, quantize_pt2e._fold_conv_bn_qat = guarded(fuse), \
        guarded(fold)
    try:
        yield
    finally:
        quantize_pt2e._fuse_conv_bn_qat, quantize_pt2e._fold_conv_bn_qat = fuse, fold


# --- torchao's rewrite patterns traced once ------------------------------------------------------
_PATTERN_GRAPHS: dict = {}
"""``pattern_graphs_traced_once``'s traced patterns, by ``_pattern_key``."""


@contextmanager
def pattern_graphs_traced_once():
    """Within the block, torchao's pattern rewrites (QAT conv + BatchNorm fuse and fold,
    ``move_exported_model_to_eval`` / ``_to_train``) get each pattern graph traced once per
    process, by a non-strict export: later requests for the same pattern get a deep copy of
    the first trace.

    What: replaces ``_get_aten_graph_module_for_pattern`` in
    ``torchao.quantization.pt2e.utils`` (which ``export_utils`` imports when it rewrites)
    and ``qat_utils`` (which imported it) by a function that keys each request on the
    pattern's code, its closure's values and defaults, the example inputs' shapes and dtypes
    (values for non-tensors), the keyword inputs likewise and the grad mode
    (``_pattern_key``) and traces a new one with ``_trace_pattern``, then restores them. A
    request it cannot key (an unhashable closure value) is traced on every call.

    Why: the function runs a strict ``torch.export`` (TorchDynamo) of a small pattern on
    every call, and each rewrite asks for the same patterns again (the fold alone: 14 per
    convolution kind), for every compile: 20 s or more of a QAT compile and of every later
    one in the same process (a precision search, a sweep, a second target), all tracing the
    same Python functions on the same shapes. A pattern's graph depends on only what the key
    holds, and the patterns are plain ATen calls, which a non-strict export traces to the
    same graph in a tenth of the time. A nested block leaves it installed. It goes when
    torchao caches its pattern graphs.
    """
    import copy

    from torchao.quantization.pt2e import qat_utils, utils

    if _installed(utils, "_get_aten_graph_module_for_pattern"):
        yield
        return
    saved = utils._get_aten_graph_module_for_pattern, qat_utils._get_aten_graph_module_for_pattern
    trace = _trace_pattern

    @_ours
    def once(pattern, example_inputs, is_cuda=False, **kwargs):
        key = _pattern_key(pattern, example_inputs, is_cuda, kwargs)
        if key is None:
            return trace(pattern, example_inputs, is_cuda, **kwargs)
        if key not in _PATTERN_GRAPHS:
            _PATTERN_GRAPHS[key] = trace(pattern, example_inputs, is_cuda, **kwargs)
        return copy.deepcopy(_PATTERN_GRAPHS[key])

    utils._get_aten_graph_module_for_pattern = qat_utils._get_aten_graph_module_for_pattern = once
    try:
        yield
    finally:
        utils._get_aten_graph_module_for_pattern, \
            qat_utils._get_aten_graph_module_for_pattern = saved


def _trace_pattern(pattern, example_inputs, is_cuda=False, **kwargs) -> GraphModule:
    """``pattern``'s ATen graph as torchao's ``_get_aten_graph_module_for_pattern`` makes
    it, traced by a non-strict export: its dead code removed and the ``copy_`` nodes that
    ``module()`` adds for mutated inputs dropped (a pattern matches without them)."""
    import torch

    if is_cuda:
        example_inputs = tuple(x.cuda() if isinstance(x, torch.Tensor) else x
                               for x in example_inputs)
    graph_module = torch.export.export(pattern, tuple(example_inputs), kwargs,
                                       strict=False).module(check_guards=False)
    graph = graph_module.graph
    graph.eliminate_dead_code()
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target == torch.ops.aten.copy_.default \
                and not node.users:
            graph.erase_node(node)
    graph_module.recompile()
    return graph_module


def _pattern_key(pattern, example_inputs, is_cuda, kwargs):
    """What a traced pattern graph depends on (``pattern_graphs_traced_once``), or None when
    part of it is not hashable."""
    import torch

    fn = getattr(pattern, "fn", pattern)  # torchao's WrapperModule holds the function
    code = getattr(fn, "__code__", None)
    if code is None:
        return None

    def value(x):
        if isinstance(x, torch.Tensor):
            return ("tensor", tuple(x.shape), x.dtype)
        return ("value", type(x), x)

    key = (code, tuple(c.cell_contents for c in (fn.__closure__ or ())),
           fn.__defaults__, tuple(value(x) for x in example_inputs), bool(is_cuda),
           tuple(sorted((k, value(v)) for k, v in kwargs.items())), torch.is_grad_enabled())
    try:
        hash(key)
    except TypeError:
        return None
    return key


# --- observer names in linear time -------------------------------------------------------------
@contextmanager
def observer_names_in_linear_time():
    """Within the block, ``prepare_pt2e`` names its observers as it does
    (``activation_post_process_<i>``, the first ``i`` not taken) in time linear in their
    number.

    What: replaces ``torch.ao.quantization.fx.prepare.get_new_attr_name_with_prefix`` (the
    name ``_insert_obs_or_fq`` calls, once per observer) by one that remembers, per module
    and prefix, the last index it found taken and tests names from there, then restores it.
    Names are only added while preparing, so every name below that index is still taken:
    the first free name is the one torch's search from 0 finds.

    Why: torch's factory tests ``hasattr(module, prefix + str(i))`` for i = 0, 1, ... on
    every call, so n observers cost n^2 / 2 attribute lookups: an unrolled 2-layer LSTM
    over 100 frames has 3,200 observers, 5 million lookups, 10 s or more of its compile.
    It goes when torch counts observers instead of searching.
    """
    # the module: the package's own ``prepare`` is a function of that name
    prepare = importlib.import_module("torch.ao.quantization.fx.prepare")

    factory = prepare.get_new_attr_name_with_prefix
    found: dict[tuple[int, str], int] = {}

    def linear(prefix: str):
        prefix = prefix.replace(".", "_")

        def new_name(module):
            key = (id(module), prefix)
            i = found.get(key, 0)
            while hasattr(module, prefix + str(i)):
                i += 1
            found[key] = i
            return prefix + str(i)

        return new_name

    prepare.get_new_attr_name_with_prefix = linear
    try:
        yield
    finally:
        prepare.get_new_attr_name_with_prefix = factory


# --- graph code generated when it is used --------------------------------------------------------
_EAGER_RECOMPILE = GraphModule.recompile
_LAZY = threading.local()
"""``graph_code_on_first_use``'s state in this thread: ``depth`` of nested blocks and
``eager`` while a pickle needs ``recompile``'s return value."""


class _ForwardOnFirstUse:
    """A pending ``GraphModule``'s ``forward``: reading it (to call it or to inspect its
    signature) generates the code first, then gives the generated method."""

    def __get__(self, module, owner=None):
        if module is None:
            return self
        _realize(module)
        return type(module).__dict__["forward"].__get__(module, owner)


_PENDING = _ForwardOnFirstUse()


def _realize(module) -> None:
    """Generate ``module``'s code if its last ``recompile`` left it pending."""
    if type(module).__dict__.get("forward") is _PENDING:
        _EAGER_RECOMPILE(module)


def _code_on_first_use(module) -> str:
    _realize(module)
    return module._code


def _realized(method: str):
    """``GraphModule.<method>``, with the code generated first (``__reduce__`` pickles the
    code ``recompile`` returns, so that ``recompile`` is eager)."""
    base = getattr(GraphModule, method)

    def call(module, *args, **kwargs):
        _realize(module)
        eager, _LAZY.eager = getattr(_LAZY, "eager", False), True
        try:
            return base(module, *args, **kwargs)
        finally:
            _LAZY.eager = eager

    return call


_ON_FIRST_USE = {"forward": _PENDING, "code": property(_code_on_first_use),
                 **{m: _realized(m) for m in ("__str__", "__reduce__", "__reduce_package__")}}


def _recompile_on_first_use(module):
    """``GraphModule.recompile`` that leaves the code to be generated when it is used."""
    if isinstance(module, _LazyGraphModule) or getattr(_LAZY, "eager", False):
        return _EAGER_RECOMPILE(module)
    codegen = module.graph._codegen
    if isinstance(codegen, _PyTreeCodeGen):  # read without the code, as recompile sets them
        module._in_spec = codegen.pytree_info.in_spec
        module._out_spec = codegen.pytree_info.out_spec
    cls = type(module)  # each GraphModule has a class of its own
    for name, value in _ON_FIRST_USE.items():
        setattr(cls, name, value)
    return None


@contextmanager
def graph_code_on_first_use():
    """Within the block, a ``GraphModule``'s Python code is generated when the module is
    called, its ``forward`` or ``code`` read, printed or pickled, not on each ``recompile``.

    What: replaces ``GraphModule.recompile`` by one that sets the pytree specs
    ``recompile`` sets and gives the module's own class (torch makes one per instance) a
    ``forward`` descriptor, a ``code`` property and ``__str__``/``__reduce__`` methods that
    generate the code first (``_realize``), then restores it. A module left pending keeps
    them after the block and generates its code on first use there too. Nested blocks
    install it once. torch's ``_LazyGraphModule`` does the same for the modules torch
    makes lazy itself; those keep their own behaviour.

    Why: ExecuTorch's passes, its pass manager's checks, ``torch.export`` and torchao's
    convert call ``recompile`` after each rewrite (about 140 times per compile), and code
    generation is linear in the graph: a fifth of a small model's compile and 8 s of an
    unrolled recurrent one, for code that the next rewrite replaces before anything runs
    it. Only the code's generation moves; the graphs, and so the programs, are the same. It
    goes when torch's lazy recompilation covers the graph modules ``torch.export`` and
    ExecuTorch create.
    """
    depth = getattr(_LAZY, "depth", 0)
    if depth == 0:
        GraphModule.recompile = _recompile_on_first_use
    _LAZY.depth = depth + 1
    try:
        yield
    finally:
        _LAZY.depth = depth
        if depth == 0:
            GraphModule.recompile = _EAGER_RECOMPILE


# --- module calls that raise, caught by the model, during non-strict export ---------------
_CALL_MODULE = None


@contextmanager
def module_calls_unwound_on_error():
    """Within the block, a module call that raises while ``torch.export`` traces it
    (non-strict) takes its entry off the tracer's module stack before the exception leaves.

    What: wraps ``torch.fx.Tracer.call_module`` (which ``PythonKeyTracer.call_module``
    calls by that name) so that on an exception the ``module_stack`` entries pushed since
    the call began are popped, then the exception goes on as it was; restored after.

    Why: ``Tracer.call_module`` pushes the module's key and pops it only when the forward
    returns. A model that calls a layer, catches what it raises and calls it again (a
    speech library's ``try: layer(x, lengths=lens) except TypeError: layer(x)``) leaves the
    failed call's key on the stack, and the next module call fails export with
    ``AssertionError: Unexpected key ...``. Eager PyTorch runs such a model; so does strict
    export. It goes when ``Tracer.call_module`` pops its key in a ``finally``.
    """
    global _CALL_MODULE
    from torch.fx import Tracer

    if _CALL_MODULE is not None:  # nested: installed once
        yield
        return
    original = _CALL_MODULE = Tracer.call_module

    def call_module(self, m, forward, args, kwargs):
        stack = getattr(self, "module_stack", None)
        depth = len(stack) if stack is not None else 0
        try:
            return original(self, m, forward, args, kwargs)
        except BaseException:
            while stack is not None and len(stack) > depth:
                stack.popitem(last=True)
            raise

    Tracer.call_module = call_module
    try:
        yield
    finally:
        Tracer.call_module = original
        _CALL_MODULE = None


# --- the patches of a whole compile ------------------------------------------------------------
COMPILE_WIDE = (graph_code_on_first_use, cia_ops_collected_once,
                conv_bn_rewrites_where_they_match, pattern_graphs_traced_once)
"""The patches whose block is a whole compile, entered once by ``compile_patches``
(``flow.run``); a stage that enters one again inside it (``quantize``, which is also called
on its own, ``to_edge``) leaves it installed. The others keep a narrower block, where what
they assume holds:

* ``observer_names_in_linear_time``: one ``prepare_pt2e`` (``quantize``); its memo of taken
  names holds while one module gains observers, and a later module can reuse a freed one's
  ``id``;
* ``validation_deferred``: the Cortex-M passes, whose result is validated after them;
* ``module_calls_unwound_on_error``: ``torch.export`` of the user's model;
* ``edge_program_from_core_aten``, ``to_executorch_without_idle_dim_order_pass``: one call
  each; ``restrict_cortex_m_quantizer``, ``cortex_m_activation_observers``: one quantizer
  object each; ``import_cortex_m_ops``: once per process."""


@contextmanager
def compile_patches():
    """Every patch of ``COMPILE_WIDE``, entered for the block."""
    import contextlib

    with contextlib.ExitStack() as stack:
        for patch in COMPILE_WIDE:
            stack.enter_context(patch())
        yield
