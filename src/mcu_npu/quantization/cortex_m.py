"""The Cortex-M (CMSIS-NN) quantizer, restricted to the nodes a filter accepts.

ExecuTorch's ``CortexMQuantizer`` annotates every pattern its int8 kernels implement. Composed
with an NPU quantizer it must leave the NPU's nodes alone, so its pattern quantizers see only
the nodes the filter accepts. The explicit-layout variant is used: its lowering handles NCHW
graphs (convolutions run channels-last between explicit transposes), which is what an
exported PyTorch model is.
"""

from __future__ import annotations

from typing import Callable, Iterator

from torch.fx import GraphModule, Node

NodeFilter = Callable[[Node], bool]


class _FilteredFinder:
    """A node finder that yields only the nodes ``keep`` accepts from another finder."""

    def __init__(self, inner, keep: NodeFilter):
        self.inner = inner
        self.keep = keep

    def find_nodes(self, model: GraphModule) -> Iterator[Node]:
        return (n for n in self.inner.find_nodes(model) if self.keep(n))

    def __repr__(self) -> str:
        return f"{self.inner!r}, restricted to the CPU's nodes"


def cortex_m_quantizer(node_filter: NodeFilter | None = None, *, is_qat: bool = False):
    """ExecuTorch's Cortex-M quantizer (explicit layout) limited to ``node_filter``'s nodes.

    QAT uses the same specs: the Cortex-M configs carry observers, which ``prepare_qat_pt2e``
    turns into fake quantizers.
    """
    from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer

    quantizer = CortexMQuantizer(use_explicit_layout=True)
    if node_filter is not None:
        for sub in quantizer.quantizers:
            finder = getattr(sub, "node_finder", None)
            if finder is not None:
                sub.node_finder = _FilteredFinder(finder, node_filter)
    return quantizer
