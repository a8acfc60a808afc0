"""The baseline NXP quantizer: ExecuTorch's own ``NeutronQuantizer`` (1.5.1) with its
``NeutronTargetSpec("imxrt700")``, quantizing through upstream's
``executorch.backends.nxp.quantizer.utils.calibrate_and_quantize`` (PT2E prepare ->
calibrate -> convert, with its swap of histogram observers on integer inputs), as
``backends/nxp/tests/executorch_pipeline.py`` does.

Upstream's backend imports NXP's eIQ Neutron SDK (``eiq_neutron_sdk``, not on PyPI) when its
``neutron_converter_manager`` is imported, and ``NeutronTargetSpec`` asks the SDK for the
target's record (name, Neutron-C or -S, hardware version). The quantizer itself reads only
``NeutronTargetNeutronC``'s fixed rules (which activations fuse into a convolution or a
linear layer), never an SDK value. So the SDK's module is stood in for by the project's test
double (``zoo/neutron_sdk_double.py``: imxrt700, Neutron-C, N3) while upstream's modules are
imported and the target spec is built, and taken out of ``sys.modules`` again, so that this
project's own compiles still see no SDK and keep using the reference NPU compiler.

Benchmarks may import ``executorch.backends.nxp``; product code never does.
"""

from __future__ import annotations

import functools
import sys

import torch


@functools.lru_cache(maxsize=1)
def _quantizer_parts():
    """(NeutronQuantizer for imxrt700, calibrate_and_quantize), imported beside the double."""
    from zoo.neutron_sdk_double import Behaviour, make_sdk

    pkg = make_sdk(Behaviour())
    modules = (pkg, pkg.neutron_converter, pkg.neutron_library_utils)
    saved = {m.__name__: sys.modules.get(m.__name__) for m in modules}
    sys.modules.update({m.__name__: m for m in modules})
    try:
        from executorch.backends.nxp.backend.neutron_target_spec import NeutronTargetSpec
        from executorch.backends.nxp.quantizer.neutron_quantizer import NeutronQuantizer
        from executorch.backends.nxp.quantizer.utils import calibrate_and_quantize

        spec = NeutronTargetSpec("imxrt700")
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return spec, NeutronQuantizer, calibrate_and_quantize


def quantize_upstream_nxp(model: torch.nn.Module, example_inputs: tuple,
                          calibration: list) -> torch.fx.GraphModule:
    """Upstream's NXP PTQ of ``model``: the converted PT2E GraphModule (runs in PyTorch)."""
    spec, NeutronQuantizer, calibrate_and_quantize = _quantizer_parts()
    exported = torch.export.export(model.eval(), example_inputs, strict=True)
    return calibrate_and_quantize(exported, calibration, NeutronQuantizer(spec))
