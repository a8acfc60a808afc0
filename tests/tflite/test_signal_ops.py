"""The operators signal models add run on the Ethos-U55 and U85 as Vela compiles them: ELU
(as MINIMUM, EXP, ADD, QUANTIZE and MAXIMUM) and LOG, each in the emitted TFLite graph that
LiteRT's reference kernels run within one output step of the quantized reference
(``zoo/op_cases.py``: ``elu``, ``elu_4d``, ``log_of_sigmoid``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from helpers import convert_module
from mcu_npu.flow.export import export_module
from mcu_npu.npu.ethos_u.vela_support import vela_rejections
from mcu_npu.targets import get_target
from mcu_npu.tflite import describe
from mcu_npu.tflite.ops_aliases import aten as edge
from mcu_npu.tflite.registry import lookup

U55, U85 = get_target("ethos-u55-128"), get_target("ethos-u85-256")


class LogOfSigmoid(nn.Module):
    def forward(self, x):
        return torch.log(torch.sigmoid(x))


@pytest.mark.parametrize("module,ops", [
    (nn.ELU(), ["MINIMUM", "EXP", "ADD", "QUANTIZE", "MAXIMUM"]),
    (LogOfSigmoid(), ["LOGISTIC", "LOG"])])
def test_vela_places_every_emitted_operator_on_the_npu(module, ops):
    torch.manual_seed(0)
    x = (torch.randn(1, 6, 5, 7),)
    _, model, _ = convert_module(module, x)
    text = describe(model.buffer)
    assert [line.split("(")[0] for line in text.splitlines()[:-2]] == ops, text
    assert vela_rejections(model, U55) == {} and vela_rejections(model, U85) == {}


def test_elu_with_another_alpha_stays_off_the_npu():
    gm = export_module(nn.ELU(alpha=0.5).eval(), (torch.randn(2, 3),))
    (node,) = [n for n in gm.graph.nodes if n.target == torch.ops.aten.elu.default]
    assert lookup(edge.elu.default).rejection(node) == \
        "elu must have alpha 1, scale 1 and input_scale 1 (TFLite ELU has no parameters)"
