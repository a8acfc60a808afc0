"""ExecuTorch export recipes: the Neutron backend's provider and the SoC target recipes.

Importing this module registers ``NeutronRecipeProvider`` with
``executorch.export.recipe_registry``, so ``ExportRecipe.get_recipe(NeutronRecipeType.INT8_PTQ)``
works; ``get_imxrt700_recipe`` combines the Neutron recipe with the Cortex-M lowering of what
the NPU leaves. ``executorch.export.export(model, [inputs, ...], recipe)`` then produces the
same program as ``mcu_npu.compile(model, inputs, target="imxrt700", calibration=[...])``.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import torch
from executorch.export import (
    BackendRecipeProvider,
    ExportRecipe,
    LoweringRecipe,
    QuantizationRecipe,
    RecipeType,
    recipe_registry,
)

from .backend.cortex_m import cortex_m_passes
from .backend.delegate import device_id_passes
from .errors import ConfigError
from .flow.edge import edge_compile_config
from .flow.place import plan
from .flow.rewrite import default_aten_passes
from .partition import NeutronPartitioner
from .quantization import NpuQuantizer
from .quantization.calibration import DEFAULT as DEFAULT_CALIBRATION
from .quantization.composed import TargetQuantizer
from .quantization.driver import (RecipePatches, begin_float64_calibration,
                                             end_float64_calibration, whole_model_check)
from .targets import NpuKind, get_target

BACKEND = "mcu_npu_neutron"


class NeutronRecipeType(RecipeType):
    """int8 recipes for eIQ Neutron targets."""

    INT8_PTQ = "neutron_int8_ptq"
    INT8_QAT = "neutron_int8_qat"

    @classmethod
    def get_backend_name(cls) -> str:
        return BACKEND


class NeutronRecipeProvider(BackendRecipeProvider):
    """Recipes for the Neutron backend: PT2E int8 quantization (PTQ, or QAT through the
    recipe's ``train_fn``) and delegation of what the NPU supports."""

    @property
    def backend_name(self) -> str:
        return BACKEND

    def get_supported_recipes(self) -> Sequence[RecipeType]:
        return list(NeutronRecipeType)

    def create_recipe(self, recipe_type: RecipeType, **kwargs) -> ExportRecipe | None:
        """kwargs: ``target`` (default ``"imxrt700"``), ``train_fn`` (QAT), ``calibration``
        (iterable of input tuples; default: the example inputs), ``npu_compiler``,
        ``operators_not_to_delegate``, ``calibration_method``, ``cortex_m`` (compose with the Cortex-M quantizer so
        the CPU's ops can run as its int8 kernels; ``get_imxrt700_recipe`` sets it)."""
        if recipe_type not in self.get_supported_recipes():
            return None
        return neutron_recipe(recipe_type, **kwargs)


def neutron_recipe(
    recipe_type: RecipeType = NeutronRecipeType.INT8_PTQ,
    *,
    target: str = "imxrt700",
    train_fn: Callable[[torch.fx.GraphModule], None] | None = None,
    calibration: Iterable | None = None,
    npu_compiler: str = "auto",
    operators_not_to_delegate: Iterable[str] = (),
    cortex_m: bool = False,
    calibration_method: str = DEFAULT_CALIBRATION,
) -> ExportRecipe:
    """The Neutron recipe for ``target``; ``calibration_method`` as ``mcu_npu.compile``'s."""
    tgt = get_target(target)
    if tgt.npu.kind is not NpuKind.NEUTRON:
        raise ConfigError(f"{tgt.name} has no eIQ Neutron NPU; Neutron recipes need a Neutron "
                          "target such as imxrt700")
    is_qat = recipe_type == NeutronRecipeType.INT8_QAT
    if is_qat and train_fn is None:
        raise ConfigError("the QAT recipe needs train_fn: a function that trains the "
                          "fake-quantized GraphModule it is given")
    excluded = tuple(operators_not_to_delegate)
    if cortex_m:
        # plans each model it annotates and stamps the plan on the graph, where the
        # partitioner (planning the Edge program it is given) reads it
        quantizer = TargetQuantizer(tgt, is_qat=is_qat, operators_not_to_delegate=excluded,
                                    npu_compiler=npu_compiler,
                                    aten_passes=default_aten_passes(tgt), planner=plan,
                                    calibration_method=calibration_method)
    else:
        quantizer = NpuQuantizer(is_qat=is_qat, aten_passes=default_aten_passes(tgt),
                                     calibration_method=calibration_method)
    partitioner = NeutronPartitioner(tgt, excluded, npu_compiler)
    samples = None if calibration is None else [tuple(s) if isinstance(s, (list, tuple))
                                                else (s,) for s in calibration]
    patches = RecipePatches()
    return ExportRecipe(
        name=f"{tgt.name}_{recipe_type.value}",
        quantization_recipe=QuantizationRecipe(
            quantizers=[quantizer], is_qat=is_qat, train_fn=train_fn,
            calibration_inputs_fn=(lambda: samples) if samples is not None else None,
            pre_prepare_passes=[patches.begin], post_convert_passes=[patches.end],
            # PTQ calibrates in float64, as compile() does, so ranges match on every host
            post_prepare_passes=None if is_qat else [begin_float64_calibration],
            pre_convert_passes=None if is_qat else [
                end_float64_calibration, whole_model_check]),
        lowering_recipe=LoweringRecipe(
            partitioners=[partitioner],
            edge_manager_transform_passes=[lambda manager: device_id_passes()],
            edge_compile_config=edge_compile_config()),
    )


def cortex_m_recipe(core: str) -> ExportRecipe:
    """Lowering of the quantized ops no delegate took to ``core``'s int8 kernels."""
    return ExportRecipe(
        name=f"{core}_int8_kernels",
        lowering_recipe=LoweringRecipe(
            edge_manager_transform_passes=[lambda manager: cortex_m_passes(core)],
            edge_compile_config=edge_compile_config()),
    )


def get_imxrt700_recipe(
    is_qat: bool = False,
    *,
    train_fn: Callable[[torch.fx.GraphModule], None] | None = None,
    calibration: Iterable | None = None,
    npu_compiler: str = "auto",
    operators_not_to_delegate: Iterable[str] = (),
    calibration_method: str = DEFAULT_CALIBRATION,
) -> ExportRecipe:
    """The i.MX RT700 as one target: Neutron N3-64 first, Cortex-M33 int8 kernels for the
    rest, with one composed quantizer deciding which rules each node gets."""
    tgt = get_target("imxrt700")
    kind = NeutronRecipeType.INT8_QAT if is_qat else NeutronRecipeType.INT8_PTQ
    neutron = neutron_recipe(kind, target=tgt.name, train_fn=train_fn, calibration=calibration,
                             npu_compiler=npu_compiler,
                             operators_not_to_delegate=operators_not_to_delegate, cortex_m=True,
                             calibration_method=calibration_method)
    return ExportRecipe.combine([neutron, cortex_m_recipe(tgt.cpu.core)], "imxrt700_int8")


recipe_registry.register_backend_recipe_provider(NeutronRecipeProvider())

__all__ = ["NeutronRecipeType", "NeutronRecipeProvider", "neutron_recipe", "cortex_m_recipe",
           "get_imxrt700_recipe", "BACKEND"]
