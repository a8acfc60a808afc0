"""ClampQuantizedActivations: a relu / relu6 after an op that re-traces as float inside the
Cortex-M lowering (a chunk of a tanh or sigmoid output) runs as a clamp at the quantized
bounds; before, it stayed a relu on int8 values, clamping at 0 instead of the zero point.
FuseActivations: a hardsigmoid fused into a linear layer keeps its zero point unclamped;
before, a hardsigmoid with narrow outputs ran many steps off the reference.
The networks are those the fuzzer found (everything on the CPU), checked by
``fuzz_nets.check``: host run within the numerics contract, ExecuTorch's runtime alike."""

from __future__ import annotations

import pytest

import mcu_npu
from zoo import fuzz_nets
from mcu_npu.runtime.pte import load

CASES = {
    "tanh_chunk_relu": {"input": ("flat", 1, 3), "blocks": [
        ("chunk", {"act": "tanh"}), ("chunk", {"act": "relu"})], "seed": 490,
        "calibration": 3},
    "sigmoid_mul_chunk_relu6": {"input": ("flat", 1, 3), "blocks": [
        ("mul", {"act": "sigmoid", "k3": False}), ("mul", {"act": "leaky_relu", "k3": True}),
        ("chunk", {"act": "relu6"}), ("to_tokens", {"how": 9})], "seed": 1,
        "calibration": 3},
    "narrow_hardsigmoid_fused": {"input": ("flat", 2, 2), "blocks": [
        ("scalar", {"c": 0, "mul": True}),
        ("inplace_add", {"k3": False, "act": "hardsigmoid"}),
        ("linear", {"out": 1, "bias": False}),
        ("autocast_off", {"act": "hardsigmoid", "k3": False})], "seed": 236,
        "calibration": 4},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_activation_after_a_float_retraced_op_keeps_the_contract(name, monkeypatch):
    compiled = []
    compile_ = mcu_npu.compile

    def on_cpu(*args, **kwargs):
        compiled.append(compile_(*args, operators_not_to_delegate=["*"], **kwargs))
        return compiled[-1]

    monkeypatch.setattr(mcu_npu, "compile", on_cpu)
    assert fuzz_nets.check(CASES[name], "imxrt700") == "ok"
    operators = load(compiled[0].buffer).operator_names
    assert "aten::relu" not in operators and "aten::hardtanh" not in operators, operators
