"""Each entry of ``mcu_npu.upstream.patches`` works, and what it relies on upstream is still
there: a test here failing after an ExecuTorch or torch upgrade says which workaround to
re-check (or to drop, when upstream now offers a supported way)."""

from __future__ import annotations

import copy
import importlib.metadata
import inspect
import operator
import subprocess
import sys
import textwrap

import pytest
import torch
from executorch.exir import to_edge
from torch import nn

from mcu_npu.upstream import patches as upstream_patches
from mcu_npu.flow.edge import core_aten_program, edge_compile_config
from mcu_npu.flow.export import export_module
from mcu_npu.quantization import NpuQuantizer, quantize

from helpers import assert_same_program


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


@pytest.mark.parametrize("package", ["executorch", "torch", "torchao"])
def test_written_against_the_installed_versions(package):
    installed = importlib.metadata.version(package)
    assert _major_minor(installed) == _major_minor(upstream_patches.WRITTEN_AGAINST[package]), (
        f"{package} {installed} is installed, upstream_patches was written against "
        f"{upstream_patches.WRITTEN_AGAINST[package]}: re-check each workaround there (and the "
        "tests below), then update WRITTEN_AGAINST")


# --- edge_program_from_core_aten ----------------------------------------------------------
def _undecorated(fn):
    """The function ExecuTorch's ``et_logger`` decorator wraps (it sets no ``__wrapped__``)."""
    fn = inspect.unwrap(fn)
    inner = [c.cell_contents for c in fn.__closure__ or () if inspect.isfunction(c.cell_contents)]
    return inner[0] if fn.__name__ == "wrapper" and len(inner) == 1 else fn


def test_to_edge_still_decomposes_then_generates_the_edge_program():
    """What ``edge_program_from_core_aten`` reproduces: ``to_edge`` runs the decomposition,
    then ``_generate_edge_program(config, program, preserve_ops=...)``, and takes no way to
    skip the decomposition."""
    from executorch.exir.program import _program

    to_edge_fn = _undecorated(_program.to_edge)
    source = inspect.getsource(to_edge_fn)
    assert "program.run_decompositions(table)" in source
    assert "_generate_edge_program(" in source and "preserve_ops=preserve_ops" in source
    params = inspect.signature(to_edge_fn).parameters
    assert list(params) == ["programs", "constant_methods", "compile_config", "generate_etrecord"]
    params = inspect.signature(_program._generate_edge_program).parameters
    assert list(params)[:2] == ["config", "program"] and "preserve_ops" in params
    assert "core_aten_ops_exception_list" in inspect.signature(
        _program.EdgeProgramManager.__init__).parameters


class ScalarAsTensor(nn.Module):  # a graph to_edge_in_place leaves to to_edge's passes
    def forward(self, x):
        return torch.ops.aten.add.Tensor(x, 2) * x


class ConvRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.relu(self.conv(x)).mean(-1)


def _targets(edge):
    return [str(n.target) for n in edge.exported_program().graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("model, shape, quantized", [(ScalarAsTensor(), (2, 3), False),
                                                     (ConvRelu(), (1, 3, 6, 6), True)])
def test_edge_program_from_core_aten_is_what_to_edge_gives(model, shape, quantized):
    x = (torch.randn(shape),)
    gm = export_module(model.eval(), x)
    if quantized:
        gm = quantize(gm, x, [x], NpuQuantizer())
    config = edge_compile_config()
    ep = core_aten_program(gm, x, config)
    expected = to_edge(copy.deepcopy(ep), compile_config=config)
    got = upstream_patches.edge_program_from_core_aten(ep, config)
    assert type(got) is type(expected) and got.methods == {"forward"}
    assert _targets(got) == _targets(expected)
    assert not any(t.startswith("aten.") for t in _targets(got))  # Edge ops only
    torch.testing.assert_close(got.exported_program().module()(*x),
                               expected.exported_program().module()(*x), rtol=0, atol=0)


# --- restrict_cortex_m_quantizer ----------------------------------------------------------
def _cortex_m_quantizer():
    from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer

    return CortexMQuantizer(use_explicit_layout=True)


def test_cortex_m_quantizer_takes_no_node_filter_and_exposes_node_finders():
    """The reason for the patch (the constructor takes no finder or filter) and what it
    patches (sub-quantizers' ``node_finder``, read by ``annotate``)."""
    from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer

    assert list(inspect.signature(CortexMQuantizer.__init__).parameters) == \
        ["self", "per_tensor_config", "use_explicit_layout"], \
        "CortexMQuantizer's arguments changed: can it take a node filter now?"
    finders = [sub.node_finder for sub in _cortex_m_quantizer().quantizers
               if hasattr(sub, "node_finder")]
    assert len(finders) == 2  # convolutions, everything else
    for finder in finders:
        assert list(inspect.signature(finder.find_nodes).parameters) == ["model"]
    pattern_quantizer = type(next(s for s in _cortex_m_quantizer().quantizers
                                  if hasattr(s, "node_finder")))
    assert "self.node_finder.find_nodes(model)" in inspect.getsource(pattern_quantizer.annotate)


class ConvLinear(nn.Module):
    """A convolution, ``act``, a spatial mean and a linear layer."""

    def __init__(self, act=torch.relu):
        super().__init__()
        self.act = act
        self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(self.act(self.conv(x)).mean((2, 3)))


def _annotated(keep) -> set[str]:
    from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

    x = (torch.randn(1, 3, 6, 6),)
    quantizer = _cortex_m_quantizer()
    gm = quantizer.transform_for_annotation(export_module(ConvLinear().eval(), x))
    upstream_patches.restrict_cortex_m_quantizer(quantizer, keep)
    assert all(isinstance(s.node_finder, upstream_patches.FilteredNodeFinder)
               for s in quantizer.quantizers if hasattr(s, "node_finder"))
    quantizer.annotate(gm)
    return {str(n.target).split(".")[1] for n in gm.graph.nodes if n.op == "call_function"
            and getattr(n.meta.get(Q_ANNOTATION_KEY), "_annotated", False)}


def test_restricted_cortex_m_quantizer_annotates_only_the_kept_nodes():
    everything = _annotated(lambda n: True)
    assert {"conv2d", "linear"} <= everything
    assert _annotated(lambda n: False) == set()
    only_linear = _annotated(lambda n: n.target == torch.ops.aten.linear.default)
    assert "linear" in only_linear and "conv2d" not in only_linear


# --- cortex_m_activation_observers -------------------------------------------------------
def test_cortex_m_activation_observers_swap_only_per_tensor_activation_observers():
    """What the patch relies on (sub-quantizers holding frozen dataclass configs with
    ``input_activation`` / ``output_activation`` specs) and what it does: every per-tensor
    activation spec gets the new observer, the rest of each config (weights, bias, the
    config's class and so its fixed-parameter methods) stays."""
    import dataclasses

    from torchao.quantization.pt2e.observer import MinMaxObserver
    from torchao.quantization.pt2e.quantizer import QuantizationSpec

    quantizer = _cortex_m_quantizer()
    before = [getattr(s, "quantization_config", None) for s in quantizer.quantizers]
    configs = [c for c in before if c is not None]
    assert configs, "CortexMQuantizer's sub-quantizers no longer hold a quantization_config"
    for config in configs:
        assert dataclasses.is_dataclass(config) and \
            {"input_activation", "output_activation"} <= {f.name for f in
                                                          dataclasses.fields(config)}

    class Marker(MinMaxObserver):
        pass

    upstream_patches.cortex_m_activation_observers(quantizer, lambda spec: Marker)
    swapped = 0
    for old, sub in zip(before, quantizer.quantizers):
        new = getattr(sub, "quantization_config", None)
        if old is None:
            assert new is None
            continue
        assert type(new) is type(old)
        assert new.weight == old.weight and new.bias == old.bias
        for name in ("input_activation", "output_activation"):
            o, n = getattr(old, name), getattr(new, name)
            if isinstance(o, QuantizationSpec) and o.qscheme in (torch.per_tensor_affine,
                                                                 torch.per_tensor_symmetric):
                assert n.observer_or_fake_quant_ctr is Marker
                assert dataclasses.replace(n, observer_or_fake_quant_ctr=None) == \
                    dataclasses.replace(o, observer_or_fake_quant_ctr=None)
                swapped += 1
            else:
                assert n == o
    assert swapped, "no per-tensor activation spec left to observe"


# --- import_cortex_m_ops -------------------------------------------------------------------
def test_cortex_m_ops_import_through_the_heavy_packages():
    """The ops module still needs helpers that sit in the packages entered bare."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(upstream_patches.CORTEX_M_OPS)
    tree = ast.parse(open(spec.origin).read())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {"executorch.backends.cortex_m.passes.passes_utils",
            "executorch.backends.cortex_m.quantizer.quantization_configs"} <= imported
    for package in upstream_patches.CORTEX_M_HEAVY_PACKAGES:
        assert importlib.util.find_spec(package).submodule_search_locations


def test_cortex_m_ops_import_with_the_tosa_tools():
    upstream_patches.import_cortex_m_ops()
    assert torch.ops.cortex_m.quantized_add.default is not None


WITHOUT_TOSA = textwrap.dedent("""
    import importlib, sys
    sys.modules["tosa_serializer"] = None  # as if the TOSA tools were not installed
    sys.modules["tosa"] = None
    try:
        importlib.import_module("executorch.backends.cortex_m.ops.operators")
        print("plain import: ok")
    except ImportError as exc:
        print("plain import: ImportError")
    for name in list(sys.modules):
        if name.startswith("executorch.backends.cortex_m"):
            del sys.modules[name]
    from mcu_npu.upstream.patches import CORTEX_M_HEAVY_PACKAGES, import_cortex_m_ops
    import_cortex_m_ops()
    import torch
    print("op:", torch.ops.cortex_m.quantized_add.default)
    print("bare packages left:", [n for n in CORTEX_M_HEAVY_PACKAGES if n in sys.modules])
""")


def test_cortex_m_ops_import_without_the_tosa_tools():
    r = subprocess.run([sys.executable, "-c", WITHOUT_TOSA], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "plain import: ImportError" in r.stdout, \
        "the Cortex-M ops import without the TOSA tools now: drop import_cortex_m_ops' stub\n" \
        + r.stdout
    assert "op: cortex_m.quantized_add.default" in r.stdout, r.stdout
    assert "bare packages left: []" in r.stdout, r.stdout


def test_observers_are_named_as_torch_names_them_in_linear_time():
    """The linear-time factory gives prepare_pt2e the names torch's own search gives (the
    first free ``prefix<i>``), also around names taken before and between calls, and
    prepare_pt2e still calls the factory by the name the patch swaps."""
    prepare = importlib.import_module("torch.ao.quantization.fx.prepare")
    from torch.ao.quantization.fx.utils import get_new_attr_name_with_prefix

    assert "get_new_attr_name_with_prefix" in inspect.getsource(prepare._insert_obs_or_fq)

    def names(factory_of, module, taken_between):
        out = []
        for i in range(8):
            name = factory_of("activation_post_process_")(module)
            setattr(module, name, nn.Identity())
            out.append(name)
            if i in taken_between:
                setattr(module, f"activation_post_process_{taken_between[i]}", nn.Identity())
        return out

    between = {2: 5, 4: 9}
    theirs = names(get_new_attr_name_with_prefix, nn.Module(), between)
    ours_module = nn.Module()
    ours_module.activation_post_process_1 = nn.Identity()
    theirs_module = nn.Module()
    theirs_module.activation_post_process_1 = nn.Identity()
    with upstream_patches.observer_names_in_linear_time():
        ours = names(prepare.get_new_attr_name_with_prefix, ours_module, between)
    assert prepare.get_new_attr_name_with_prefix is get_new_attr_name_with_prefix
    assert ours == names(get_new_attr_name_with_prefix, theirs_module, between)
    assert theirs[:3] == ["activation_post_process_0", "activation_post_process_1",
                          "activation_post_process_2"]


def test_prepare_names_observers_the_same_with_the_linear_time_factory():
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).eval()
    x = (torch.randn(2, 4),)

    def observers(patched: bool):
        gm = torch.export.export(model, x).module(check_guards=False)
        if patched:
            with upstream_patches.observer_names_in_linear_time():
                prepared = prepare_pt2e(gm, NpuQuantizer())
        else:
            prepared = prepare_pt2e(gm, NpuQuantizer())
        return [(n.name, n.target, [a.name for a in n.all_input_nodes])
                for n in prepared.graph.nodes if n.op == "call_module"]

    plain = observers(False)
    assert len(plain) >= 4
    assert observers(True) == plain


# --- pattern_graphs_traced_once ---------------------------------------------------------------
def test_rewrite_patterns_are_traced_once_and_handed_out_as_copies(monkeypatch):
    from torchao.quantization.pt2e import qat_utils, utils
    from torchao.quantization.pt2e.export_utils import WrapperModule

    traced = []
    trace = upstream_patches._trace_pattern

    def counting(pattern, example_inputs, is_cuda=False, **kwargs):
        traced.append(pattern)
        return trace(pattern, example_inputs, is_cuda, **kwargs)

    monkeypatch.setattr(upstream_patches, "_trace_pattern", counting)
    monkeypatch.setattr(upstream_patches, "_PATTERN_GRAPHS", {})
    torchao_trace = utils._get_aten_graph_module_for_pattern

    def pattern(scale):  # a new closure on each call, as torchao builds its patterns
        return WrapperModule(lambda x, w: torch.nn.functional.conv2d(x, w) * scale)

    x, w = torch.randn(1, 1, 3, 3), torch.randn(1, 1, 1, 1)
    with upstream_patches.pattern_graphs_traced_once():
        get = utils._get_aten_graph_module_for_pattern
        assert qat_utils._get_aten_graph_module_for_pattern is get
        first = get(pattern(2.0), (x, w))
        first.graph.erase_node(next(n for n in first.graph.nodes if n.op == "output"))
        again = get(pattern(2.0), (x, w))              # same code, closure and shapes
        other_scale = get(pattern(3.0), (x, w))        # another closure value
        other_shape = get(pattern(2.0), (torch.randn(1, 1, 4, 4), w))
    assert utils._get_aten_graph_module_for_pattern is torchao_trace
    assert qat_utils._get_aten_graph_module_for_pattern is torchao_trace
    assert len(traced) == 3
    # the copy handed out first was changed; the one handed out again is whole
    assert str(again.graph) == str(trace(pattern(2.0), (x, w)).graph)
    assert 3.0 in [a for n in other_scale.graph.nodes for a in n.args]
    assert other_shape is not again


def _graph_form(gm) -> list[tuple]:
    """A graph as a pattern matcher sees it: each node's kind, target and arguments, with
    nodes named by their position (names differ between tracers and do not match)."""
    index = {n: i for i, n in enumerate(gm.graph.nodes)}

    def arg(a):
        if isinstance(a, torch.fx.Node):
            return ("node", index[a])
        if isinstance(a, (list, tuple)):
            return tuple(arg(x) for x in a)
        return a

    return [(n.op, n.target if n.op != "placeholder" else None, arg(n.args),
             tuple(sorted((k, arg(v)) for k, v in n.kwargs.items()))) for n in gm.graph.nodes]


def test_non_strict_pattern_traces_are_the_graphs_torchao_traces(monkeypatch):
    """Every pattern function a conv + BatchNorm QAT prepare and convert asks for traces to
    the graph torchao's strict export gives (its first request, with its inputs)."""
    from torchao.quantization.pt2e import utils
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_qat_pt2e

    requests = {}
    trace = upstream_patches._trace_pattern

    def recording(pattern, example_inputs, is_cuda=False, **kwargs):
        code = getattr(pattern, "fn", pattern).__code__
        traced = trace(pattern, example_inputs, is_cuda, **kwargs)
        # the graph as traced, before the rewrite edits the copies handed out of it
        requests.setdefault(code, (pattern, example_inputs, is_cuda, kwargs,
                                   _graph_form(traced)))
        return traced

    monkeypatch.setattr(upstream_patches, "_trace_pattern", recording)
    monkeypatch.setattr(upstream_patches, "_PATTERN_GRAPHS", {})

    class ConvBN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

        def forward(self, x):
            return torch.relu(self.bn(self.conv(x)))

    x = torch.randn(2, 3, 6, 6)
    with upstream_patches.pattern_graphs_traced_once():
        gm = torch.export.export(ConvBN().train(), (x,)).module(check_guards=False)
        prepared = prepare_qat_pt2e(gm, NpuQuantizer(is_qat=True))
        prepared(x)
        convert_pt2e(prepared)
    assert len(requests) >= 4  # the fuse's and the fold's pattern functions
    for pattern, example_inputs, is_cuda, kwargs, ours in requests.values():
        theirs = utils._get_aten_graph_module_for_pattern(pattern, example_inputs, is_cuda,
                                                          **kwargs)
        assert ours == _graph_form(theirs), getattr(pattern, "fn", pattern)



# --- graph_code_on_first_use ----------------------------------------------------------------------
class _AddOne(nn.Module):
    def forward(self, x, scale):
        return x * scale + 1


def _edited(gm):
    """``gm`` with its ``+ 1`` turned into ``+ 2`` in the graph (the code not regenerated)."""
    add = next(n for n in gm.graph.nodes if n.target is operator.add)
    add.args = (add.args[0], 2)
    return gm


def test_graph_code_is_generated_when_the_module_is_used():
    x = torch.arange(4.0)
    gm = torch.fx.symbolic_trace(_AddOne())
    old_code = gm.code
    with upstream_patches.graph_code_on_first_use():
        assert torch.fx.GraphModule.recompile is not upstream_patches._EAGER_RECOMPILE
        _edited(gm).recompile()
        assert gm.__dict__["_code"] == old_code  # nothing generated yet
        assert torch.equal(gm(x, 3.0), x * 3 + 2)  # the call generates it
        assert "+ 2" in gm.__dict__["_code"]
        gm.graph.lint()
        gm.recompile()
        assert "+ 2" in gm.code  # reading the code generates it
    assert torch.fx.GraphModule.recompile is upstream_patches._EAGER_RECOMPILE


def test_a_module_left_pending_generates_its_code_on_first_use_after_the_block():
    x = torch.arange(4.0)
    pending = []
    with upstream_patches.graph_code_on_first_use():
        with upstream_patches.graph_code_on_first_use():  # nested: installed once
            pass
        assert torch.fx.GraphModule.recompile is not upstream_patches._EAGER_RECOMPILE
        for _ in range(5):
            gm = torch.fx.symbolic_trace(_AddOne())  # its constructor recompiles, too
            _edited(gm).recompile()
            pending.append(gm)
    by_call, by_code, by_str, by_pickle, by_copy = pending
    assert list(inspect.signature(by_call.forward).parameters) == ["x", "scale"]
    assert torch.equal(by_call(x, 3.0), x * 3 + 2)
    assert "+ 2" in by_code.code
    assert "+ 2" in str(by_str)
    import pickle

    assert torch.equal(pickle.loads(pickle.dumps(by_pickle))(x, 3.0), x * 3 + 2)
    assert torch.equal(copy.deepcopy(by_copy)(x, 3.0), x * 3 + 2)
    assert torch.equal(by_copy(x, 3.0), x * 3 + 2)


def test_graph_code_on_first_use_gives_the_same_program(monkeypatch):
    from contextlib import nullcontext

    import mcu_npu
    from mcu_npu.quantization import driver

    torch.manual_seed(0)
    model = ConvLinear(torch.sigmoid).eval()
    g = torch.Generator().manual_seed(1)
    cal = [(torch.randn(1, 3, 8, 8, generator=g),) for _ in range(8)]

    def compiled():  # the sigmoid on the Cortex-M kernels, the rest on the NPU
        return mcu_npu.compile(model, cal[0], target="corstone-300", calibration=cal,
                               operators_not_to_delegate=["sigmoid"])

    lazy = compiled()
    monkeypatch.setattr(upstream_patches, "COMPILE_WIDE", tuple(
        p for p in upstream_patches.COMPILE_WIDE
        if p is not upstream_patches.graph_code_on_first_use))
    monkeypatch.setattr(driver, "graph_code_on_first_use", nullcontext)
    eager = compiled()
    assert_same_program(lazy, eager, cal, "code on first use", "code at once")


# --- to_executorch_without_idle_dim_order_pass ----------------------------------------------
def test_to_executorch_reads_the_edge_config_only_to_add_the_dim_order_pass():
    """What the patch relies on: ``to_executorch`` reads ``self.compile_config`` once, to
    build its pass list, which holds ``LegalizePortableDimOrderPass`` unless the config's
    ``_skip_dim_order`` is set, and the pass rewrites only the ops of its ``_target_ops``."""
    import dataclasses

    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes.legalize_portable_dim_order_pass import (
        LegalizePortableDimOrderPass,
    )
    from executorch.exir.program import _program

    source = inspect.getsource(_undecorated(_program.EdgeProgramManager.to_executorch))
    assert source.count("self.compile_config") == 1
    assert "edge_to_executorch_passes(" in source

    def legalizes(config):
        return any(isinstance(p, LegalizePortableDimOrderPass) for p in
                   _program.edge_to_executorch_passes(ExecutorchBackendConfig(),
                                                      edge_compile_config=config))

    config = edge_compile_config()
    assert legalizes(config)
    assert not legalizes(dataclasses.replace(config, _skip_dim_order=True))
    assert "call_operator" in vars(LegalizePortableDimOrderPass)
    assert "if op not in self._target_ops" in inspect.getsource(
        LegalizePortableDimOrderPass.call_operator)


@pytest.mark.parametrize("target, excluded, legalized", [
    ("corstone-300", (), False),  # every op on the NPU: nothing for the pass to look at
    ("imxrt700", ("*",), True),  # the mean left to a portable kernel: the pass runs
])
def test_to_executorch_without_the_idle_pass_gives_the_same_program(monkeypatch, target,
                                                                      excluded, legalized):
    from executorch.exir.passes.legalize_portable_dim_order_pass import (
        LegalizePortableDimOrderPass,
    )

    import mcu_npu
    from mcu_npu.flow import serialize

    torch.manual_seed(0)
    model = ConvLinear().eval()
    g = torch.Generator().manual_seed(1)
    cal = [(torch.randn(1, 3, 8, 8, generator=g),) for _ in range(8)]
    seen = []
    original = LegalizePortableDimOrderPass.call_operator

    def counted(self, op, *args):
        seen.append(op)
        return original(self, op, *args)

    monkeypatch.setattr(LegalizePortableDimOrderPass, "call_operator", counted)

    def compiled():
        seen.clear()
        return mcu_npu.compile(model, cal[0], target=target, calibration=cal,
                               operators_not_to_delegate=list(excluded))

    patched = compiled()
    assert bool(seen) == legalized
    monkeypatch.setattr(serialize, "to_executorch_without_idle_dim_order_pass",
                        lambda edge: edge.to_executorch())
    plain = compiled()
    assert seen  # to_executorch as it is runs the pass
    assert_same_program(patched, plain, cal, "without the idle pass", "to_executorch")


# --- cia_ops_collected_once -----------------------------------------------------------------
def test_run_decompositions_still_collects_the_cia_ops_by_these_names():
    """What the patch swaps: both modules call the function by the name they import from
    ``torch._export.utils``."""
    import torch.export.decomp_utils as decomp_utils
    import torch.export.exported_program as exported_program
    from torch._export import utils

    for module in (exported_program, decomp_utils):
        assert module._collect_all_valid_cia_ops is utils._collect_all_valid_cia_ops
    assert "_collect_all_valid_cia_ops()" in inspect.getsource(
        exported_program._split_decomp_table_to_cia_and_python_decomp)
    assert "_collect_all_valid_cia_ops()" in inspect.getsource(
        decomp_utils.CustomDecompTable.materialize)


def test_collected_cia_ops_are_torch_s_and_follow_new_registrations():
    import torch.export.exported_program as exported_program
    from torch._export.utils import _collect_all_valid_cia_ops

    with upstream_patches.cia_ops_collected_once():
        cached = exported_program._collect_all_valid_cia_ops
        assert cached is not _collect_all_valid_cia_ops
        first = cached()
        assert first == _collect_all_valid_cia_ops()
        first.clear()  # a copy: the caller may change it
        assert cached() == _collect_all_valid_cia_ops()
        lib = torch.library.Library("mcu_npu_cia_test", "DEF")  # a new namespace and CIA op
        lib.define("double(Tensor x) -> Tensor")
        lib.impl("double", lambda x: x * 2, "CompositeImplicitAutograd")
        ops = cached()
        assert torch.ops.mcu_npu_cia_test.double.default in ops
        assert ops == _collect_all_valid_cia_ops()
    assert exported_program._collect_all_valid_cia_ops is _collect_all_valid_cia_ops


def test_run_decompositions_gives_the_same_program_with_the_collected_cia_ops():
    from mcu_npu.flow.edge import _decomposition_table

    class MatmulOfInput(nn.Module):
        def forward(self, x, w):
            return torch.nn.functional.linear(x, w) @ w

    args = (torch.randn(2, 8), torch.randn(8, 8))

    def decomposed():
        ep = torch.export.export(MatmulOfInput(), args)
        return ep.run_decompositions(_decomposition_table(edge_compile_config().preserve_ops))

    plain = decomposed()
    with upstream_patches.cia_ops_collected_once():
        cached = decomposed()
    assert cached.graph_module.code == plain.graph_module.code
    assert [n.meta["val"].shape for n in cached.graph.nodes if "val" in n.meta and
            isinstance(n.meta["val"], torch.Tensor)] == \
        [n.meta["val"].shape for n in plain.graph.nodes if "val" in n.meta and
         isinstance(n.meta["val"], torch.Tensor)]


# --- validation_deferred ------------------------------------------------------------------
def test_exported_programs_run_their_verifiers_through_validate():
    """What the patch relies on: building a program and a pass manager's check both call
    ``ExportedProgram.validate``."""
    from executorch.exir.pass_manager import ExportedProgramPassManager
    from torch.export import ExportedProgram

    assert "self.validate()" in inspect.getsource(ExportedProgram.__init__)
    assert "exported_program.validate()" in inspect.getsource(ExportedProgramPassManager.check)


def test_validation_deferred_skips_the_verifiers_only_within_the_block():
    from torch._export.verifier import SpecViolationError
    from torch.export import ExportedProgram

    ep = torch.export.export(nn.Linear(3, 2), (torch.randn(1, 3),))
    node = next(n for n in ep.graph.nodes if n.op == "call_function")
    val = node.meta.pop("val")  # a program its verifier refuses
    with upstream_patches.validation_deferred():
        with upstream_patches.validation_deferred():
            ep.validate()
        ep.validate()  # still deferred: the outer block is open
        rebuilt = ExportedProgram(root=ep.graph_module, graph=ep.graph,
                                  graph_signature=ep.graph_signature, state_dict=ep.state_dict,
                                  range_constraints=ep.range_constraints,
                                  module_call_graph=ep.module_call_graph,
                                  constants=ep.constants, verifiers=ep.verifiers)
    with pytest.raises(SpecViolationError, match="missing val"):
        ep.validate()
    with pytest.raises(SpecViolationError, match="missing val"):
        rebuilt.validate()
    node.meta["val"] = val
    ep.validate()


def test_cortex_m_passes_still_validate_the_program_they_produce(monkeypatch):
    """``run_passes`` validates its result once, after the passes."""
    from torch._export.verifier import SpecViolationError

    from mcu_npu.backend import cortex_m_pass_skips

    ep = torch.export.export(nn.Linear(3, 2), (torch.randn(1, 3),))

    def breaks(exported_program, *passes):
        node = next(n for n in exported_program.graph.nodes if n.op == "call_function")
        node.meta.pop("val")
        return exported_program

    monkeypatch.setattr(cortex_m_pass_skips, "may_change", lambda *args: True)
    from mcu_npu.upstream import private

    monkeypatch.setattr(private, "transform_program", breaks)
    with pytest.raises(SpecViolationError, match="missing val"):
        cortex_m_pass_skips.run_passes(ep, [object], None)


# --- module_calls_unwound_on_error ------------------------------------------------------------

class _LengthsTried(torch.nn.Module):
    """Each layer offered ``lengths`` first, as a speech library's layer loop does."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.ReLU()])

    def forward(self, x):
        for layer in self.layers:
            try:
                x = layer(x, lengths=None)
            except TypeError:
                x = layer(x)
        return x


def test_non_strict_export_still_leaves_a_failed_module_call_on_the_stack():
    """What the patch is for: when this stops failing, the patch can go."""
    with pytest.raises(AssertionError, match="Unexpected key"):
        torch.export.export(_LengthsTried().eval(), (torch.randn(2, 4),), strict=False)


def test_module_calls_unwound_on_error_lets_the_model_catch_the_call():
    with upstream_patches.module_calls_unwound_on_error():
        with upstream_patches.module_calls_unwound_on_error():  # nested: installed once
            ep = torch.export.export(_LengthsTried().eval(), (torch.randn(2, 4),),
                                     strict=False)
        assert torch.fx.Tracer.call_module is not _TRACER_CALL_MODULE
    assert torch.fx.Tracer.call_module is _TRACER_CALL_MODULE
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert targets == [torch.ops.aten.linear.default, torch.ops.aten.relu.default]


_TRACER_CALL_MODULE = torch.fx.Tracer.call_module


# --- compile_patches ------------------------------------------------------------------------
def _swapped_names():
    """The upstream attributes the compile-wide patches replace, as they are now."""
    import torch.export.exported_program as exported_program
    from torchao.quantization.pt2e import quantize_pt2e, utils
    from torch.fx import GraphModule

    return (exported_program._collect_all_valid_cia_ops, quantize_pt2e._fuse_conv_bn_qat,
            utils._get_aten_graph_module_for_pattern, GraphModule.recompile)


def test_compile_patches_install_each_once_and_restore_them():
    """Within ``compile_patches`` every compile-wide patch is installed; a stage entering
    one again inside (``quantize``, ``to_edge``) finds it installed and leaves it, and the
    outer block restores upstream's functions."""
    upstream = _swapped_names()
    with upstream_patches.compile_patches():
        installed = _swapped_names()
        assert all(a is not b for a, b in zip(installed, upstream))
        for patch in upstream_patches.COMPILE_WIDE:
            with patch():
                assert _swapped_names() == installed
        assert _swapped_names() == installed
    assert _swapped_names() == upstream


def test_a_compile_installs_the_compile_wide_patches_once(monkeypatch):
    """A compile whose op falls back to the CPU quantizes twice (the trial, then with the
    Cortex-M rules); both quantizations run with the replacements the compile installed,
    the same objects, and upstream's functions are back after it."""
    import mcu_npu
    from torchao.quantization.pt2e import quantize_pt2e

    seen = []
    convert = quantize_pt2e.convert_pt2e

    def recording(*args, **kwargs):
        seen.append(_swapped_names())
        return convert(*args, **kwargs)

    monkeypatch.setattr(quantize_pt2e, "convert_pt2e", recording)
    upstream = _swapped_names()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    gen = torch.Generator().manual_seed(0)
    samples = [(torch.randn(1, 8, generator=gen),) for _ in range(8)]
    program = mcu_npu.compile(model, samples[0], target="corstone-300", calibration=samples,
                              operators_not_to_delegate=["aten.relu"])
    assert program.report.summary["ops_on_npu"] < program.report.summary["ops_total"]
    assert len(seen) >= 2
    assert all(names == seen[0] for names in seen)
    assert all(a is not b for a, b in zip(seen[0], upstream))
    assert _swapped_names() == upstream
