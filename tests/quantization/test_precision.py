"""Precision requests: parsing, resolution to ATen nodes (modules, nodes, specificity), the
reasons a requested node stays int8, and the int16 quantization specs and annotations."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from mcu_npu.errors import ConfigError
from mcu_npu.graph.ids import node_id
from mcu_npu.flow.export import export_module
from mcu_npu.flow.rewrite import default_aten_passes
from mcu_npu.quantization import QuantSpecs
from mcu_npu.quantization.annotators import output_dtype
from mcu_npu.quantization.composed import TargetQuantizer
from mcu_npu.quantization.npu_quantizer import NpuQuantizer
from mcu_npu.quantization.precision import (CPU_REASON, AutoPrecision, PrecisionChoice,
                                            PrecisionRequest, parse_precision, resolve)
from mcu_npu.targets import get_target


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 4 * 4, 5))

    def forward(self, x):
        return torch.sigmoid(self.head(torch.relu(self.conv(x))))


def aten_graph(target="corstone-300"):
    torch.manual_seed(0)
    x = torch.randn(1, 3, 6, 6)
    tgt = get_target(target)
    graph = export_module(Net().eval(), (x,))
    return TargetQuantizer(tgt, aten_passes=default_aten_passes(tgt)) \
        .transform_for_annotation(graph), tgt


def test_parse_accepts_the_documented_forms():
    assert parse_precision(None) == PrecisionRequest()
    assert parse_precision("int16") == PrecisionRequest("int16")
    assert isinstance(parse_precision("auto"), AutoPrecision)
    req = parse_precision({"default": "int8", "overrides": {"gru": "int16"}})
    assert req.overrides == (("gru", "int16"),) and not req.all_int8
    assert req.to_json() == {"default": "int8", "overrides": {"gru": "int16"}}
    assert parse_precision({"overrides": {"fc": "int8"}}).all_int8


@pytest.mark.parametrize("bad,words", [
    ("int4", "'int8' or 'int16'"),
    ({"default": "fp16"}, "precision['default']"),
    ({"defaults": "int8"}, "unknown key"),
    ({"overrides": ["gru"]}, "maps module or node names"),
    ({"overrides": {"gru": "int32"}}, "override 'gru'"),
    (16, "not int"),
])
def test_parse_refuses_bad_requests_naming_the_problem(bad, words):
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_precision(bad)


def test_auto_settings_are_checked():
    with pytest.raises(ConfigError, match="together"):
        AutoPrecision(accuracy_fn=lambda prog: 1.0)
    with pytest.raises(ConfigError, match="positive"):
        AutoPrecision(max_cycles_ratio=0)


def test_modules_and_nodes_resolve_with_the_most_specific_winning():
    graph, tgt = aten_graph()
    ids = {n.name: node_id(n) for n in graph.graph.nodes if n.op == "call_function"}
    # the whole head int16, but its linear node (by name) int8
    req = parse_precision({"default": "int8",
                           "overrides": {"head": "int16", "linear": "int8"}})
    choice = resolve(req, graph, tgt, lambda ident: False)
    assert ids["linear"] not in choice.int16
    assert ids["flatten"] in choice.int16
    assert ids["conv2d"] not in choice.int16
    everything = resolve(PrecisionRequest("int16"), graph, tgt, lambda ident: False)
    assert {ids["conv2d"], ids["linear"], ids["sigmoid"]} <= everything.int16


def test_an_override_naming_nothing_lists_the_modules():
    graph, tgt = aten_graph()
    with pytest.raises(ConfigError, match=r"'haed' names no module or node.*conv.*head"):
        resolve(parse_precision({"overrides": {"haed": "int16"}}), graph, tgt,
                lambda ident: False)


def test_requested_nodes_that_cannot_be_int16_say_why():
    graph, tgt = aten_graph()
    ids = {n.name: node_id(n) for n in graph.graph.nodes if n.op == "call_function"}
    on_cpu = {ids["linear"]}
    choice = resolve(PrecisionRequest("int16"), graph, tgt, on_cpu.__contains__)
    assert choice.kept_int8[ids["linear"]] == CPU_REASON
    assert ids["conv2d"] in choice.int16
    neutron, imx = aten_graph("imxrt700")
    kept = resolve(PrecisionRequest("int16"), neutron, imx, lambda ident: False)
    assert not kept.int16
    assert all("int8 activations only" in r for r in kept.kept_int8.values()) and kept.kept_int8


def test_int16_specs_are_symmetric_with_the_fixed_16_bit_outputs():
    specs = QuantSpecs(int16=True)
    act = specs.activation
    assert (act.dtype, act.quant_min, act.quant_max) == (torch.int16, -32768, 32767)
    assert act.qscheme == torch.per_tensor_symmetric
    fixed = specs.fixed("sigmoid")
    assert (fixed.scale, fixed.zero_point, fixed.dtype) == (1 / 32768, 0, torch.int16)
    assert specs.weight().dtype == torch.int8 and specs.per_tensor_weight.dtype == torch.int8
    assert QuantSpecs().fixed("sigmoid").zero_point == -128


def test_annotation_requantizes_where_int8_and_int16_meet():
    """The int16 conv's relu output is int16; the int8 linear behind the view gets its own
    int8 input observer (a requantize), and the view follows its int16 input."""
    graph, _ = aten_graph()
    ids = {n.name: node_id(n) for n in graph.graph.nodes if n.op == "call_function"}
    NpuQuantizer(precision=PrecisionChoice(int16=frozenset({ids["conv2d"]}))) \
        .annotate(graph)
    nodes = {n.name: n for n in graph.graph.nodes}
    assert output_dtype(nodes["relu"]) == torch.int16
    view = next(n for n in graph.graph.nodes if n.name in ("view", "flatten"))
    assert output_dtype(view) == torch.int16
    linear = nodes["linear"]
    ann = linear.meta["quantization_annotation"]
    assert ann.input_qspec_map[linear.args[0]].dtype == torch.int8
    assert output_dtype(linear) == torch.int8
    assert output_dtype(nodes["sigmoid"]) == torch.int8
