"""QuantizeFullAsInteger: an LSTM's zero cell state and a bidirectional GRU's zero state, run
on the Cortex-M kernels, are made in int8; before it, ExecuTorch's Cortex-M lowering left the
float ``full`` feeding an int8 dequantize and the program was refused."""

from __future__ import annotations

import pytest
import torch
from executorch.exir.dialects._ops import ops as exir_ops

import mcu_npu
from helpers import sqnr_holds
from mcu_npu.flow.measure import measure_accuracy
from mcu_npu.passes.edge import QuantizeFullAsInteger
from mcu_npu.runtime.pte import load
from zoo.model_compiles import RECURRENT


def _edge_of_full(value: float, scale: float, zero_point: int):
    """An Edge program: ``x * dequantize(quantize(full([1, 4], value)))``."""

    class M(torch.nn.Module):
        def forward(self, x):
            q = torch.ops.quantized_decomposed.quantize_per_tensor(
                torch.full([1, 4], value), scale, zero_point, -128, 127, torch.int8)
            return x * torch.ops.quantized_decomposed.dequantize_per_tensor(
                q, scale, zero_point, -128, 127, torch.int8)

    from executorch.exir import EdgeCompileConfig, to_edge

    x = torch.randn(1, 4)
    edge = to_edge(torch.export.export(M(), (x,)),
                   compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return M(), x, edge.exported_program()


@pytest.mark.parametrize("value, scale, zero_point", [(0.0, 1e-6, -128), (0.5, 0.01, 3),
                                                      (2.5, 0.01, 0)])
def test_the_integer_full_holds_what_the_quantize_gave(value, scale, zero_point):
    model, x, ep = _edge_of_full(value, scale, zero_point)
    result = QuantizeFullAsInteger()(ep)
    assert result.modified
    fulls = [n for n in ep.graph.nodes if n.target == exir_ops.edge.aten.full.default]
    assert len(fulls) == 1 and fulls[0].kwargs["dtype"] == torch.int8
    assert not any(n.target == exir_ops.edge.quantized_decomposed.quantize_per_tensor.default
                   for n in ep.graph.nodes)
    assert torch.equal(ep.module()(x), model(x))  # 2.5 / 0.01 = 250 saturates at 127


def test_a_full_read_in_float_and_an_integer_full_are_left_alone():
    class M(torch.nn.Module):
        def forward(self, x):
            return x + torch.full([1, 4], 1.0) + torch.full([1, 4], 2, dtype=torch.int8)

    from executorch.exir import EdgeCompileConfig, to_edge

    ep = to_edge(torch.export.export(M(), (torch.randn(1, 4),)),
                 compile_config=EdgeCompileConfig(_check_ir_validity=False)).exported_program()
    assert not QuantizeFullAsInteger()(ep).modified


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lstm", "bigru"])
def test_recurrent_layer_with_zero_state_runs_on_cortex_m_within_contract(name):
    """Everything on the Cortex-M kernels of corstone-300: the program compiles, makes its
    zero state in int8, and its host run over 8 held-out inputs keeps the numerics contract
    (and, as a model-level test, runs the same in ExecuTorch's own runtime)."""
    factory, shape = RECURRENT[name]
    torch.manual_seed(0)
    model = factory().eval()
    g = torch.Generator().manual_seed(1)
    calibration = [(torch.randn(shape, generator=g),) for _ in range(16)]
    held_out = [(torch.randn(shape, generator=g),) for _ in range(8)]
    prog = mcu_npu.compile(model, calibration[0], target="corstone-300",
                           calibration=calibration, operators_not_to_delegate=["*"])
    assert prog.report.summary["ops_on_npu"] == 0
    assert "aten::full" in load(prog.buffer).operator_names
    acc = measure_accuracy(model, prog.reference, lambda s: prog.run(*s), held_out)
    assert sqnr_holds(acc["sqnr_db"], acc["reference_sqnr_db"]), acc
