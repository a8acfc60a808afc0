"""Models from a public model library (timm), as a user brings them: random weights, a small
input, a few calibration samples. Shared by ``tests/test_model_library.py`` (a representative
few, in CI) and ``benchmarks/model_library.py`` (the long list).

timm imports torchvision, whose compiled operators do not load beside this torch build (its
import fails registering fake kernels for ``torchvision::nms``); timm's models use none of
them, so ``import_timm`` declares the two schemas torchvision looks up before importing it."""

from __future__ import annotations

import functools
import math
import warnings

import torch

INPUT = 96          # image side: small enough for a microcontroller, what users try first
CALIBRATION = 8     # calibration samples
TESTS = 8           # held-out inputs the numerics are measured on (all outputs together)

# name -> timm keyword arguments ("input": an image side other than INPUT). Families: plain
# and SE convnets, hard-swish, re-parameterised branches, GroupNorm, weight-standardised
# convs, ConvNeXt-style, and transformers.
MODELS: dict[str, dict] = {
    "mobilenetv2_050": {},
    "mobilenetv3_small_050": {},
    "mobilenetv3_large_075": {},
    "mobilenetv4_conv_small": {},
    "efficientnet_b0": {},
    "efficientnet_lite0": {},
    "efficientnet_b0_gn": {},
    "mnasnet_050": {},
    "semnasnet_050": {},
    "fbnetc_100": {},
    "ghostnet_050": {},
    "ghostnetv2_100": {},
    "lcnet_050": {},
    "tinynet_e": {},
    "mixnet_s": {},
    "hardcorenas_a": {},
    "rexnet_100": {},
    "resnet10t": {},
    "resnet18": {},
    "regnetx_002": {},
    "regnety_002": {},
    "repvgg_a0": {},
    "mobileone_s0": {},
    "repvit_m0_9": {},
    "fastvit_t8": {},
    "nf_regnet_b0": {},
    "gernet_s": {},
    "dla46_c": {},
    "convnext_atto": {},
    "convnextv2_atto": {},
    "edgenext_xx_small": {},
    "poolformer_s12": {},
    "efficientvit_b0": {},
    "efficientvit_m0": {"img_size": INPUT},
    "mobilevit_xxs": {},
    "mobilevitv2_050": {},
    "levit_128s": {"img_size": INPUT},
    "efficientformer_l1": {"input": 224},  # its last stage's attention is built for 7x7 tokens
    "efficientformerv2_s0": {"img_size": INPUT},
    "vit_tiny_patch16_224": {"img_size": INPUT},
    "deit_tiny_patch16_224": {"img_size": INPUT},
    "shvit_s1": {},
    "tiny_vit_5m_224": {},
    "starnet_s050": {},
}


# name -> the targets it runs wholly on the NPU, in one partition: the representative few
# the tests compile (tests/test_model_library.py) on the targets ``targets_of`` gives.
TEST_SET: dict[str, set[str]] = {
    "mobilenetv3_small_050": {"corstone-300", "corstone-320"},
    "convnext_atto": {"corstone-320"},
    "vit_tiny_patch16_224": {"corstone-320"},
    "levit_128s": {"corstone-320"},
    "mobilevit_xxs": {"corstone-320"},
}
TARGETS = ["imxrt700", "corstone-300", "corstone-320"]
ON_IMXRT700 = ("mobilenetv3_small_050", "convnext_atto")
"""The test models also compiled for imxrt700, where hard-swish and LayerNorm stay on the
Cortex-M33 (no Neutron operator) and GELU runs approximated where the measurement allows
(``flow.approximate``): a CNN with hard-swish and ConvNeXt's GELU and LayerNorm cover that
split; the transformers would add the same ops, at 20-40 s each."""


TEST_DEPTH: dict[str, dict] = {
    "vit_tiny_patch16_224": {"depth": 2},
    "levit_128s": {"depth": (1, 1, 1)},
    "convnext_atto": {"depths": (1, 1, 2, 1)},
    "efficientnet_b0_gn": {"depth_multiplier": 0.25},
    "mobilevit_xxs": {"blocks": 1, "transformer_depth": 1},
}
"""How a test model gets fewer repeats of its blocks: timm keyword arguments, or for
MobileViT (whose depths timm takes from a fixed config) each stage's block count and
transformer depth. Every block type, stage and downsampling step stays, so the tests meet
each spelling the full model has (``benchmarks/model_library.py`` compiles the full depth)
at a fraction of the compile."""


def _shallow_mobilevit(timm, name: str, blocks: int, transformer_depth: int):
    """timm's ByobNet for MobileViT ``name`` with ``blocks`` blocks per stage and
    ``transformer_depth`` layers in each MobileViT block."""
    from dataclasses import replace

    def fewer(block):
        if isinstance(block, tuple):
            return tuple(fewer(b) for b in block)
        kwargs = dict(block.block_kwargs or {})
        if "transformer_depth" in kwargs:
            kwargs["transformer_depth"] = transformer_depth
        return replace(block, d=min(block.d, blocks), block_kwargs=kwargs)

    cfg = timm.models.mobilevit.model_cfgs[name]
    return timm.models.byobnet.ByobNet(replace(cfg, blocks=fewer(cfg.blocks)), num_classes=10)


def targets_of(name: str) -> list[str]:
    """The targets the tests compile test model ``name`` for."""
    return TARGETS if name in ON_IMXRT700 else [t for t in TARGETS if t != "imxrt700"]


_TIMM = None


def import_timm():
    """timm, imported so that torchvision's missing compiled operators do not stop it."""
    global _TIMM
    if _TIMM is None:
        for op in ("nms", "qnms"):
            try:
                torch.library.define(f"torchvision::{op}",
                                     "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            except RuntimeError:  # already declared (torchvision's own library loaded)
                pass
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import timm
        _TIMM = timm
    return _TIMM


def build(name: str, seed: int = 0, shallow: bool = False):
    """(model, example inputs, calibration samples, held-out test inputs) for ``name``; with
    ``shallow``, its ``TEST_DEPTH`` variant."""
    timm = import_timm()
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kwargs = dict(MODELS.get(name, {}))
        size = kwargs.pop("input", INPUT)
        depth = TEST_DEPTH.get(name, {}) if shallow else {}
        if name.startswith("mobilevit_") and depth:
            model = _shallow_mobilevit(timm, name, **depth)
        else:
            model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs, **depth)
    return with_samples(model, (1, 3, size, size), seed)


def with_samples(model, shape: tuple, seed: int):
    """(model in eval mode, example inputs, calibration samples, held-out test inputs):
    random inputs of ``shape`` drawn from ``seed + 1``, the BatchNorm statistics settled on
    the calibration samples."""
    g = torch.Generator().manual_seed(seed + 1)
    calibration = [(torch.randn(shape, generator=g),) for _ in range(CALIBRATION)]
    tests = [(torch.randn(shape, generator=g),) for _ in range(TESTS)]
    settle_batch_norm(model, torch.cat([c[0] for c in calibration]))
    return model.eval(), calibration[0], calibration, tests


@functools.lru_cache(maxsize=None)
def compiled(name: str, target: str):
    """(model, compiled program, held-out test inputs, ``measure``'s figures) for ``name``
    (its ``TEST_DEPTH`` variant) on ``target``, compiled once per test process: tests that
    check other properties of the same compile share it (mark them ``same_compile(name,
    target)`` so pytest-xdist runs them in one worker)."""
    import mcu_npu

    model, example, calibration, tests = build(name, shallow=True)
    prog = mcu_npu.compile(model, example, target=target, calibration=calibration)
    return model, prog, tests, measure(prog, model, tests)


def same_compile(name: str, target: str):
    """The pytest mark that sends every test using ``compiled(name, target)`` to one worker
    (``--dist loadgroup``)."""
    import pytest

    return pytest.mark.xdist_group(f"model_library-{name}-{target}")


def settle_batch_norm(model: torch.nn.Module, batch: torch.Tensor) -> None:
    """Give every BatchNorm the statistics of ``batch`` (one training-mode pass, no weight
    updates), as training would: random weights with a BatchNorm's initial statistics (mean 0,
    variance 1) make activations grow or vanish layer by layer, which no trained network
    does, and the quantization figures would say more about that than about the compiler."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average: one pass sets the batch's statistics
    model.train()
    with torch.no_grad():
        model(batch)
    model.eval()


def measure(prog, model, tests) -> dict:
    """SQNR against the float model of the host run and of the quantized reference, over all
    outputs of ``tests``."""
    from mcu_npu.estimate.metrics import flat_outputs, sqnr_db
    from mcu_npu.quantization.exact import run_exact

    flo, run, ref = [], [], []
    with torch.no_grad():
        for t in tests:
            flo += flat_outputs(model(*t))
            run += flat_outputs(prog.run(*t))
            ref += flat_outputs(run_exact(prog.reference, *t))
    flo, run, ref = torch.cat(flo), torch.cat(run), torch.cat(ref)
    host, reference = sqnr_db(flo, run), sqnr_db(flo, ref)
    return {"host_sqnr": host, "ref_sqnr": reference,
            "finite": bool(torch.isfinite(run).all()) and not math.isnan(host)}
