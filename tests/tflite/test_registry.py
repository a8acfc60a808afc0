"""The one operator table: every annotated ATen op has its entry, rules resolve, duplicates
are refused, and operators annotated without a converter say why."""

from __future__ import annotations

import pytest
import torch

from mcu_npu.quantization import NpuQuantizer
from mcu_npu.quantization.annotators import RULES
from mcu_npu.tflite.ops_aliases import aten
from mcu_npu.tflite.registry import (
    ANNOTATIONS, OPERATORS, PRESERVED_ATEN_OPS, REGISTRY, Operator, annotated_only, operator,
    register,
)

at = torch.ops.aten


def test_every_annotation_rule_resolves():
    assert ANNOTATIONS and all(e.rule(p) in RULES for p, e in ANNOTATIONS.items())
    assert set(NpuQuantizer.supported_ops()) == set(ANNOTATIONS)


def test_each_op_has_one_entry():
    for entry in OPERATORS:
        assert all(REGISTRY[t] is entry for t in entry.targets)
        assert all(ANNOTATIONS[p] is entry for p in entry.aten_packets)


def test_duplicates_are_refused():
    with pytest.raises(ValueError, match="already has a converter"):
        operator(aten.relu.default)(lambda ctx, node: None)
    with pytest.raises(ValueError, match="already has an annotation rule"):
        annotated_only(at.relu, annotate="unary", reason="twice")
    with pytest.raises(ValueError, match="annotation rule"):
        operator(aten.erf.default, aten=(at.erf,))(lambda ctx, node: None)
    assert aten.erf.default not in REGISTRY and at.erf not in ANNOTATIONS


def test_annotated_without_converter_says_so():
    only = [e for e in OPERATORS if e.convert is None]
    assert only and all(e.reason and not e.targets for e in only)
    assert at.expand in {p for e in only for p in e.aten_packets}
    with pytest.raises(ValueError, match="reason"):
        register(Operator((), None, (), ((at.erf, "unary"),)))


def test_fusable_clamps_are_one_rule():
    clamps = [e for e in OPERATORS if e.fuses_into_producer]
    assert len(clamps) == 1
    (clamp,) = clamps
    assert set(clamp.targets) == {aten.relu.default, aten.hardtanh.default, aten.clamp.default}
    assert {at.relu, at.relu6, at.hardtanh, at.clamp} <= set(clamp.aten_packets)


def test_hardsigmoid_is_one_entry():
    entry = REGISTRY[aten.hardsigmoid.default]
    assert ANNOTATIONS[at.hardsigmoid] is entry and entry.rule(at.hardsigmoid) == "unary"
    assert at.hardsigmoid.default in PRESERVED_ATEN_OPS
