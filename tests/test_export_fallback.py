"""When non-strict torch.export fails on a data-dependent value, strict export is tried before
giving up, and the compile says which one captured the model."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import mcu_npu
from helpers import sqnr_db, sqnr_holds
from mcu_npu.errors import UnsupportedModelError
from mcu_npu.flow.export import CAPTURED_BY, export_module
from mcu_npu.quantization.exact import run_exact


class LengthsFromShape(nn.Module):
    """A sequence cut at the longest of its lengths, read as a Python int (conformer
    libraries do this with the lengths of a padded batch)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        lengths = torch.full((x.shape[0],), x.shape[1])
        return self.fc(x[:, :int(lengths.max().item())])


class LengthsGiven(nn.Module):
    def forward(self, x, lengths):
        return x[:, :int(lengths.max().item())] * 2


class BranchOnData(nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x - 1


def test_a_value_read_from_shapes_is_captured_by_strict_export_and_folded():
    x = torch.randn(2, 6, 8)
    model = LengthsFromShape().eval()
    gm = export_module(model, (x,))
    assert gm.meta[CAPTURED_BY].startswith("strict torch.export (non-strict export failed "
                                           "on a data-dependent value")
    assert not any(n.target is torch.ops.aten.item.default for n in gm.graph.nodes)
    assert torch.equal(gm(x), model(x))


def test_a_value_read_from_input_data_is_not_folded():
    x, lengths = torch.randn(2, 6), torch.tensor([3, 5])
    gm = export_module(LengthsGiven(), (x, lengths))
    assert gm.meta[CAPTURED_BY].startswith("strict")
    assert any(n.target is torch.ops.aten.item.default for n in gm.graph.nodes)
    assert torch.equal(gm(x, torch.tensor([2, 4])), x[:, :4] * 2)


def test_other_models_are_captured_by_non_strict_export():
    gm = export_module(nn.Linear(3, 2), (torch.randn(1, 3),))
    assert gm.meta[CAPTURED_BY] == "non-strict torch.export"


def test_a_model_neither_export_captures_names_both_failures():
    with pytest.raises(UnsupportedModelError, match=r"\(non-strict\); .* \(strict\)"):
        export_module(BranchOnData(), (torch.randn(3),))


def test_the_compile_says_strict_export_captured_the_model():
    g = torch.Generator().manual_seed(0)
    samples = [(torch.randn(2, 6, 8, generator=g),) for _ in range(16)]
    model = LengthsFromShape().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = mcu_npu.compile(model, samples[0], target="corstone-300",
                               calibration=samples[:8])
    assert any(n.startswith("the model was captured by strict torch.export")
               for n in prog.report.notes)
    tests = samples[8:]
    with torch.no_grad():
        floats = torch.cat([model(*t).flatten() for t in tests])
        refs = torch.cat([run_exact(prog.reference, *t).flatten().float() for t in tests])
    got = torch.cat([prog.run(*t)[0].flatten() for t in tests])
    assert sqnr_holds(sqnr_db(floats, got), sqnr_db(floats, refs))
