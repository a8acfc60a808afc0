"""ExecuTorch recipes: the Neutron provider is registered on import, and
``executorch.export.export(model, samples, get_imxrt700_recipe())`` gives the program
``mcu_npu.compile`` gives."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from executorch.export import ExportRecipe, export, recipe_registry

import mcu_npu
from mcu_npu.errors import ConfigError
from mcu_npu.recipes import (
    BACKEND,
    NeutronRecipeType,
    get_imxrt700_recipe,
    neutron_recipe,
)
from mcu_npu.runtime import load_program

from zoo import model_compiles
from helpers import MixedNpuCpu, assert_loads_in_executorch, calibration_set, fit
from zoo.model_compiles import same_compile

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def _recipe_program(model, samples, recipe):
    session = export(model, samples, recipe)
    buffer = bytes(session.get_executorch_program_manager().buffer)
    program = load_program(buffer)
    assert_loads_in_executorch(buffer, samples[0], program.run(*samples[0]))
    return program


def _assert_same_outputs(prog, program, samples):
    for sample in samples:
        a, b = prog.run(*sample)[0], program.run(*sample)[0]
        assert torch.equal(a, b), float((a - b).abs().max())


def test_provider_is_registered_with_executorch():
    assert BACKEND in recipe_registry.list_backends()
    assert set(recipe_registry.get_supported_recipes(BACKEND)) == set(NeutronRecipeType)
    recipe = ExportRecipe.get_recipe(NeutronRecipeType.INT8_PTQ, target="imxrt700")
    assert recipe.quantization_recipe.quantizers and recipe.lowering_recipe.partitioners


def test_recipe_errors():
    with pytest.raises(ConfigError, match="train_fn"):
        neutron_recipe(NeutronRecipeType.INT8_QAT)
    with pytest.raises(ConfigError, match="Neutron"):
        neutron_recipe(target="corstone-300")
    with pytest.raises(ConfigError, match="unknown target"):
        neutron_recipe(target="imxrt9000")


Mixed = MixedNpuCpu  # convs around a gelu kept on the CPU


def test_recipe_equals_compile_with_cortex_m_fallback():
    torch.manual_seed(0)
    model = Mixed().eval()
    samples = calibration_set((torch.randn(1, 3, 8, 8),), n=6)
    kept = ["linear", "gelu"]  # a GELU kept off the NPU: compile does not approximate it
    prog = mcu_npu.compile(model, samples[0], calibration=samples,
                           operators_not_to_delegate=kept)
    assert prog.report.summary["ops_on_cortex_m"] >= 2
    program = _recipe_program(model, samples,
                              get_imxrt700_recipe(operators_not_to_delegate=kept))
    assert any(n.startswith("cortex_m::") for n in program.operator_names)
    _assert_same_outputs(prog, program, samples)


RECIPE_MODELS = ["ds_cnn", "resnet8"]
"""The MLPerf Tiny models the recipe is checked on: depthwise-separable convolutions with
BatchNorm, average pooling and a classifier (DS-CNN), residual adds (ResNet-8). MobileNetV1
and the autoencoder add no op or path of the recipe these two leave unchecked."""


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(name, marks=same_compile("mlperf", name, "imxrt700"))
                                  for name in RECIPE_MODELS])
def test_recipe_equals_compile_on_mlperf_tiny(name):
    model, prog, tests = model_compiles.mlperf(name, "imxrt700")  # the shared compile
    samples = model_compiles.mlperf_calibration(name)
    assert_loads_in_executorch(prog.buffer, samples[0], prog.run(*samples[0]))
    compiler = model_compiles.MLPERF_COMPILERS["imxrt700"]
    program = _recipe_program(model, samples, get_imxrt700_recipe(npu_compiler=compiler))
    _assert_same_outputs(prog, program, samples[:4] + tests[:4])


@pytest.mark.slow
def test_qat_recipe_is_at_least_as_accurate_as_ptq():
    sys.path.insert(0, EXAMPLES)
    import digits

    batch = 16
    model = digits.trained_model()
    x, y, xv, yv = digits.split()
    samples = [(x[i:i + batch],) for i in range(0, 8 * batch, batch)]

    def accuracy(program) -> float:
        n = len(xv) // batch * batch
        hits = sum(int((program.run(xv[i:i + batch])[0].argmax(1) == yv[i:i + batch]).sum())
                   for i in range(0, n, batch))
        return 100.0 * hits / n

    def train(prepared):
        fit(prepared, x, y, torch.optim.SGD(prepared.parameters(), lr=2e-4, momentum=0.9),
            epochs=2, batch=batch)

    ptq = accuracy(_recipe_program(model, samples, get_imxrt700_recipe()))
    qat = accuracy(_recipe_program(model, samples, get_imxrt700_recipe(is_qat=True,
                                                                       train_fn=train)))
    print(f"PTQ {ptq:.1f}%  QAT {qat:.1f}%")
    assert ptq >= 90.0
    assert qat >= ptq, (ptq, qat)


def test_recipe_runs_torchao_within_the_patches_compile_runs_it_in():
    from torch.fx import GraphModule
    from torchao.quantization.pt2e import utils as torchao_utils

    from mcu_npu.upstream import patches

    recipe = get_imxrt700_recipe().quantization_recipe
    (begin,), (end,) = recipe.pre_prepare_passes, recipe.post_convert_passes
    tracer = torchao_utils._get_aten_graph_module_for_pattern
    model = torch.fx.symbolic_trace(torch.nn.ReLU())
    assert begin(model) is model
    try:
        assert GraphModule.recompile is not patches._EAGER_RECOMPILE
        assert torchao_utils._get_aten_graph_module_for_pattern is not tracer
        begin(model)  # a second begin (after a stage raised) does not enter them twice
    finally:
        assert end(model) is model
    assert GraphModule.recompile is patches._EAGER_RECOMPILE
    assert torchao_utils._get_aten_graph_module_for_pattern is tracer
    end(model)
