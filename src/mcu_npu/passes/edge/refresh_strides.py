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

The values are those of a whole propagation (``graph.fake_values.propagate``), but a node is
run only when its recorded value may differ from what its op gives now. A stale value can sit
behind any op (a pass that updated a node and not the ``getitem`` reading it leaves every
node after it stale), so no op is trusted for what it is; each node's recorded value is
checked against its inputs' current values instead, where that is exact without running it:

* a per-tensor quantize / dequantize of a contiguous input: the rule ``propagate`` makes it
  by (a contiguous tensor of the input's shape in the op's dtype);
* a ``getitem``: the element of its producer's value;
* an op returning one fresh tensor (no alias of an input), called as an earlier node of this
  propagation was, on inputs of the same layouts and the same other arguments: that node's
  value. Fake tensors hold no data, so an op's value is a function of that call.

Any other node runs, as in a whole propagation. A kept value is a fake tensor of the
propagation's mode, as a snapshot leaves it (no gradient, no constant).
"""

from __future__ import annotations

import operator

import torch
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram
from torch.fx import Node

from ...upstream.private import FakeTensor, detect_fake_mode, make_contiguous_strides_for
from ...graph.fake_values import _Propagation, call_key, layout, output_dtype, plain_fake


class RefreshStrides(ExportedProgramPassBase):
    """Propagate fake tensors through the graph again; report whether a stride changed."""

    def call(self, program: ExportedProgram) -> ExportedProgramPassResult:
        graph_module = program.graph_module
        placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
        values = [n.meta.get("val") for n in placeholders]
        mode = detect_fake_mode([v for v in values if isinstance(v, torch.Tensor)])
        if mode is None:
            return ExportedProgramPassResult(program, False)
        refresh = _Refresh(graph_module, mode)
        refresh.propagate_dont_convert_inputs(*values)
        return ExportedProgramPassResult(program, refresh.changed)


class _Refresh(_Propagation):
    """The propagation, keeping each recorded value known to equal what running gives."""

    def __init__(self, gm, mode):
        super().__init__(gm, mode)
        self.changed = False
        self._calls: dict[tuple, tuple] = {}  # call key -> the layout of its value

    def run_node(self, n: Node):
        old = n.meta.get("val")
        key = None
        if n.op == "call_function" and _kept_form(old, self._mode) and \
                "unbacked_bindings" not in n.meta:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            made, key = self._made(n.target, args, kwargs)
            if made is not None and made == layout(old):
                return old
        result = super().run_node(n)
        new = n.meta.get("val")
        if key is not None and isinstance(new, FakeTensor):
            self._calls[key] = layout(new)
        self.changed = self.changed or _strides(new) != _strides(old)
        return result

    def _made(self, target, args, kwargs) -> tuple:
        """(the layout running this call gives when known without running it, else None;
        the key to remember it by once run, or None)."""
        dtype = output_dtype(target, args, kwargs)
        if dtype is not None:
            x = args[0]
            return (tuple(x.shape), tuple(make_contiguous_strides_for(x.shape)), dtype,
                    x.device, 0, torch.strided), None
        if target is operator.getitem:
            value = args[0][args[1]] if isinstance(args[0], (list, tuple)) else None
            return (layout(value) if isinstance(value, torch.Tensor) else None), None
        key = call_key(target, args, kwargs, self._mode)
        made = self._calls.get(key) if key is not None else None
        return made, (key if made is None else None)


def _kept_form(val, mode) -> bool:
    """``val`` is a fake tensor as a snapshot of this propagation leaves it."""
    return plain_fake(val, mode) and not val.requires_grad


def _strides(val):
    if isinstance(val, torch.Tensor):
        return tuple(val.stride())
    if isinstance(val, (list, tuple)):
        return tuple(_strides(v) for v in val)
    return None
