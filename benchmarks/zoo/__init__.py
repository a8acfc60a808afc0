"""The model sets the benchmarks compile and the tests check: public library models
(``public``: timm; ``speech``: SpeechBrain), random small networks (``fuzz_nets``),
attention's spellings, single operators (``op_cases``), models whose ops stay on the CPU
(``cpu_fallback``), the compiles several tests share (``model_compiles``), a double of NXP's
Neutron SDK, and the checks of a program's runs (``checks``). Tests and benchmarks import
them as ``zoo.<module>`` (``benchmarks/`` is on the path: pytest's ``pythonpath``, a
benchmark script's own directory)."""

import importlib


def factory(model_set: str, name: str):
    """``(model, example inputs, calibration samples)`` of model ``name`` of ``model_set``
    (``public``, ``speech``): a model factory for ``mcu_npu.sweep``
    (``functools.partial(factory, model_set, name)`` crosses to a worker process by
    reference, the model is built there)."""
    return importlib.import_module(f"zoo.{model_set}").build(name)[:3]
