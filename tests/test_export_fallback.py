"""A model non-strict torch.export cannot capture because it reads a value out of a tensor
(``int(lengths.max().item())``, as speech libraries build a conformer's padding mask) is
captured by strict export instead, with a warning saying so; the value, computed from
constants, becomes the number it is, and the program holds the numerics contract. A size
read from an input is compiled at its example value, with a warning naming the input."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch

from helpers import assert_warned_at, sqnr_holds
from zoo.public import measure
from mcu_npu.flow.export import export_module


class LengthMasked(torch.nn.Module):
    """Conv front-end, a padding mask from relative lengths (all ones: no padding), masked
    mean over time, a linear head: the length mask as conformer encoders write it."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 16, 3, padding=1)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x, relative_lengths=None):
        if relative_lengths is None:
            relative_lengths = torch.ones(x.shape[0])
        lengths = torch.round(relative_lengths * x.shape[-1])
        max_len = int(lengths.max().item())
        mask = torch.arange(max_len)[None, :] < lengths[:, None]
        y = torch.relu(self.conv(x)).transpose(1, 2)
        y = y.masked_fill(~mask[..., None], 0.0)
        return self.head(y.mean(1))


def _example(seed: int = 0):
    return torch.randn(1, 8, 50, generator=torch.Generator().manual_seed(seed))


def test_non_strict_export_needs_no_fallback_for_a_static_model():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        export_module(torch.nn.Conv1d(8, 4, 3), (_example(),))


def test_a_length_mask_is_captured_by_strict_export_and_its_length_folded():
    model = LengthMasked().eval()
    with pytest.warns(UserWarning, match="strict torch.export"):
        gm = export_module(model, (_example(),))
    items = [n for n in gm.graph.nodes
             if n.target in (torch.ops.aten.item.default,
                             torch.ops.aten._local_scalar_dense.default)]
    assert not items, items
    for seed in range(3):
        x = _example(seed)
        torch.testing.assert_close(gm(x), model(x), rtol=1e-5, atol=1e-6)


def test_a_length_read_from_an_input_is_compiled_at_its_example_value_with_a_warning():
    """Lengths given as an input: the program has the padded length of the example (full
    lengths), and a warning names the input and the value."""
    model = LengthMasked().eval()
    full = torch.ones(1)
    with pytest.warns(UserWarning) as caught:
        gm = export_module(model, (_example(), full))
    messages = [str(w.message) for w in caught]
    assert any("strict torch.export" in m for m in messages), messages
    assert any("relative_lengths" in m and "compiled as 50" in m for m in messages), messages
    for seed in range(3):
        x = _example(seed)
        torch.testing.assert_close(gm(x, full), model(x, full), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_strictly_exported_model_compiles_and_holds_the_contract():
    import mcu_npu

    model = LengthMasked().eval()
    calibration = [(_example(s),) for s in range(8)]
    tests = [(_example(100 + s),) for s in range(8)]
    with pytest.warns(UserWarning, match="captured by strict torch.export") as caught:
        line = inspect.currentframe().f_lineno + 1
        prog = mcu_npu.compile(model, calibration[0], target="corstone-320",
                               calibration=calibration)
    assert_warned_at(caught, "captured by strict torch.export", __file__, line)
    assert prog.report.summary["ops_on_npu"] > 0
    figures = measure(prog, model, tests)
    assert figures["finite"]
    assert sqnr_holds(figures["host_sqnr"], figures["ref_sqnr"]), figures
