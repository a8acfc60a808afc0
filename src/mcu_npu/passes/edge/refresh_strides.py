"""RefreshStrides: every node's fake value computed again from its inputs, in place.

``torch.export`` records strides as eager PyTorch would make them: an op reading a permuted
view (``x.permute(0, 3, 1, 2)``) gets channels-last strides, and so does its result.
``to_edge`` turns the view into ``permute_copy``, whose result is contiguous, but leaves the
strides of the nodes after it as they were. ExecuTorch gives each tensor the dim order of
its final strides, and the passes that run after delegation (the Cortex-M lowering) compute
them again, so a partition converted from the stale strides can expect its input in another
memory order than the program hands it. The Ethos-U runtime copies bytes as they lie, so the
NPU would read the tensor transposed. Before partitioning, the strides are brought in line
with what the ops produce; shapes and dtypes do not change.
"""

from __future__ import annotations

import torch
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch._guards import detect_fake_mode
from torch.export import ExportedProgram

from ...graph.fake_values import propagate


class RefreshStrides(ExportedProgramPassBase):
    """Propagate fake tensors through the graph again; report whether a stride changed."""

    def call(self, program: ExportedProgram) -> ExportedProgramPassResult:
        graph_module = program.graph_module
        placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
        values = [n.meta.get("val") for n in placeholders]
        mode = detect_fake_mode([v for v in values if isinstance(v, torch.Tensor)])
        before = {n: _strides(n.meta.get("val")) for n in graph_module.graph.nodes}
        if mode is None:
            return ExportedProgramPassResult(program, False)
        with mode:
            propagate(graph_module, mode, *values)
        changed = any(_strides(n.meta.get("val")) != s for n, s in before.items())
        return ExportedProgramPassResult(program, changed)


def _strides(val):
    if isinstance(val, torch.Tensor):
        return tuple(val.stride())
    if isinstance(val, (list, tuple)):
        return tuple(_strides(v) for v in val)
    return None
