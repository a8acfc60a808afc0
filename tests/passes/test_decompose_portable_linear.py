"""DecomposePortableLinear: a linear layer left to the portable kernels (which have no
``aten::linear.out``) becomes ``permute_copy`` and ``addmm`` / ``mm``; before it, a program
whose Cortex-M lowering failed held a ``linear`` the firmware could not run."""

from __future__ import annotations

import warnings

import pytest
import torch
from executorch.exir import EdgeCompileConfig, to_edge
from executorch.exir.dialects._ops import ops as exir_ops

import mcu_npu
from zoo.attention_spellings import spelling
from helpers import calibration_set, sqnr_holds
from mcu_npu.passes.edge import DecomposePortableLinear
from mcu_npu.estimate.metrics import sqnr_db
from mcu_npu.runtime.pte import load

aten = exir_ops.edge.aten


@pytest.mark.parametrize("shape, bias", [((3, 8), True), ((2, 5, 8), True), ((8,), False),
                                         ((1, 2, 3, 8), False)])
def test_linear_becomes_portable_ops_computing_the_same(shape, bias):
    layer = torch.nn.Linear(8, 4, bias=bias).eval()
    x = torch.randn(shape)
    ep = to_edge(torch.export.export(layer, (x,)), compile_config=EdgeCompileConfig(
        _check_ir_validity=False, preserve_ops=[torch.ops.aten.linear.default]),
    ).exported_program()
    assert any(n.target == aten.linear.default for n in ep.graph.nodes)
    assert DecomposePortableLinear()(ep).modified
    targets = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert aten.linear.default not in targets
    assert (aten.addmm.default if bias else aten.mm.default) in targets
    with torch.no_grad():
        got, want = ep.module()(x), layer(x)
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)


def test_attention_on_portable_kernels_is_a_program_the_firmware_runs():
    """Everything on the CPU of an Ethos-U85 target without Cortex-M kernels: every CPU op
    runs as a portable kernel; the program calls no kernel the target lacks (no linear), and
    the host run keeps the numerics contract."""
    module, x = spelling("sdpa_causal")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = mcu_npu.compile(module, x, target="ethos-u85-256",
                               calibration=calibration_set(x, seed=1),
                               operators_not_to_delegate=["*"])
    assert not [w for w in caught if "no kernel for" in str(w.message)]
    operators = load(prog.buffer).operator_names
    assert "aten::linear" not in operators and "aten::addmm" in operators, operators
    # the report still reads like the model: the decomposed layers are its linear ops
    assert [o.op for o in prog.report.ops].count("aten.linear") >= 2
    tests = calibration_set(x, seed=2)
    with torch.no_grad():
        want = torch.cat([module(*t).flatten() for t in tests])
        host = torch.cat([prog.run(*t)[0].flatten() for t in tests])
        ref = torch.cat([prog.reference(*t).flatten() for t in tests])
    assert sqnr_holds(sqnr_db(want, host), sqnr_db(want, ref))
