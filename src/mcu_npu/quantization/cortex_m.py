"""The Cortex-M (CMSIS-NN) quantizer, restricted to the nodes a filter accepts.

ExecuTorch's ``CortexMQuantizer`` annotates every pattern its int8 kernels implement. Composed
with an NPU quantizer it must leave the NPU's nodes alone, so its pattern quantizers see only
the nodes the filter accepts (``upstream.patches.restrict_cortex_m_quantizer``: the quantizer
takes no node filter). The explicit-layout variant is used: its lowering handles NCHW
graphs (convolutions run channels-last between explicit transposes), which is what an
exported PyTorch model is.
"""

from __future__ import annotations

from ..upstream.patches import (NodeFilter, cortex_m_activation_observers,
                                restrict_cortex_m_quantizer)
from .calibration import DEFAULT
from .qspecs import activation_observer


def cortex_m_quantizer(node_filter: NodeFilter | None = None, *, is_qat: bool = False,
                       calibration_method: str = DEFAULT):
    """ExecuTorch's Cortex-M quantizer (explicit layout) limited to ``node_filter``'s nodes,
    its per-tensor activations calibrated by ``calibration_method`` as the NPU's are
    (``qspecs.activation_observer``; upstream's own choice is ``HistogramObserver``).

    QAT uses upstream's specs: the Cortex-M configs carry observers, which
    ``prepare_qat_pt2e`` turns into fake quantizers.
    """
    from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer

    quantizer = CortexMQuantizer(use_explicit_layout=True)
    if not is_qat:
        cortex_m_activation_observers(
            quantizer, lambda spec: activation_observer(calibration_method, qscheme=spec.qscheme))
    if node_filter is not None:
        restrict_cortex_m_quantizer(quantizer, node_filter)
    return quantizer
