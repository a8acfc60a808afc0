"""Export: the float model captured by ``torch.export`` as a plain ATen graph.

Non-strict export (tracing the Python code with fake tensors) is tried first. When it stops
on a data-dependent value, e.g. ``int(lengths.max().item())`` of a length mask, strict export
(TorchDynamo, which captures the value as a symbol) is tried before giving up, and a warning
says strict export captured the model. A program has fixed shapes, so each such value is
computed once, on the example inputs, and put in the graph as the number it is: exact when it
follows from constants (a length mask built from an all-ones length); when it depends on an
input (lengths given as an input), a warning names the input and the value the program
assumes (the padded length, for the usual example of full-length inputs)."""

from __future__ import annotations

import warnings

import torch
from torch.fx import GraphModule
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from ..errors import UnsupportedModelError, source_line, stage

EXPORT_HINT = ("make the model capturable by torch.export (no data-dependent control flow, "
               "see torch.export's message), or report it")


def export(model: torch.nn.Module, example_inputs: tuple, stacklevel: int = 2) -> GraphModule:
    """The compile's first stage: ``export_module``, its failures named as the stage's.
    Warnings point where ``warnings.warn(..., stacklevel=stacklevel)`` in the caller would."""
    with stage("exporting the model", EXPORT_HINT):
        return export_module(model, example_inputs, stacklevel + 1)


def export_module(model: torch.nn.Module, example_inputs: tuple,
                  stacklevel: int = 2) -> GraphModule:
    """torch.export a module into a plain ATen GraphModule, with export's message on failure:
    non-strict, then strict where non-strict stopped on a data-dependent value."""
    example_inputs = tuple(x.contiguous() if isinstance(x, torch.Tensor) else x
                           for x in example_inputs)  # odd strides would read as channels-last
    model = model.eval()
    try:
        ep = _export(model, example_inputs, strict=False)
    except Exception as exc:  # torch raises many types; the message is what matters
        if not _data_dependent(exc):
            raise UnsupportedModelError(
                f"torch.export could not capture the model: {_first(exc)}") from exc
        try:
            ep = _export(model, example_inputs, strict=True)
        except Exception as strict_exc:
            raise UnsupportedModelError(
                f"torch.export could not capture the model: non-strict export stopped on a "
                f"data-dependent value ({_first(exc)}), and strict export failed too: "
                f"{_first(strict_exc)}") from strict_exc
        warnings.warn(f"the model was captured by strict torch.export (TorchDynamo): "
                      f"non-strict export stopped on a data-dependent value ({_first(exc)})",
                      UserWarning, stacklevel=stacklevel + 1)
        try:
            return _specialize(ep.module(check_guards=False), example_inputs, stacklevel + 1)
        except Exception as fixed_exc:
            raise UnsupportedModelError(
                f"strict torch.export captured the model, but putting its data-dependent "
                f"values in as numbers failed: {_first(fixed_exc)}") from fixed_exc
    return ep.module(check_guards=False)


_SCALARS = (torch.ops.aten.item.default, torch.ops.aten._local_scalar_dense.default)


def _specialize(gm: GraphModule, example_inputs: tuple, stacklevel: int) -> GraphModule:
    """``gm`` with each ``.item()`` replaced by its value on ``example_inputs``, exported
    again (now without data-dependent values) into a plain graph; a warning for each value
    read from an input."""
    scalars = [n for n in gm.graph.nodes if n.target in _SCALARS]
    values = _values(gm, scalars, example_inputs)
    for node in scalars:
        inputs = _inputs_of(node)
        if inputs:
            warnings.warn(
                f"{node.name} ({source_line(node)}) reads a value out of the input(s) "
                f"{', '.join(inputs)}; a program has fixed shapes, so it is compiled as "
                f"{values[node]}, its value for the example inputs: the program computes what "
                f"the model does for inputs on which it is {values[node]}",
                UserWarning, stacklevel=stacklevel + 1)
    for node in scalars:
        for user in list(node.users):
            user.args, user.kwargs = torch.fx.node.map_arg(
                (user.args, user.kwargs), lambda a: values[a] if a is node else a)
        gm.graph.erase_node(node)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return _export(gm, example_inputs, strict=False).module(check_guards=False)


def _inputs_of(node) -> list[str]:
    """The model inputs (placeholders) ``node`` is computed from."""
    seen, stack, found = set(), [node], []
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            found.append(n.name)
        stack.extend(n.all_input_nodes)
    return sorted(found)


def _values(gm: GraphModule, nodes: list, example_inputs: tuple) -> dict:
    """The values ``nodes`` take when ``gm`` runs on ``example_inputs``."""
    wanted, values = set(nodes), {}

    class Record(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            if n in wanted:
                values[n] = out
            return out

    with torch.no_grad():
        Record(gm).run(*example_inputs)
    return values


def _export(model: torch.nn.Module, example_inputs: tuple, strict: bool):
    with warnings.catch_warnings():
        # nn.RNN/GRU/LSTM re-list their own parameters in ``_flat_weights`` on every call;
        # export reports that as an attribute assigned during export: nothing the user can or
        # needs to change
        warnings.filterwarnings("ignore", message=r"The tensor attributes .*_flat_weights",
                                category=UserWarning)
        return torch.export.export(model, example_inputs, strict=strict)


def _data_dependent(exc: BaseException) -> bool:
    """Whether export stopped on a value it could only know by running the model (a guard
    on an ``.item()``, a data-dependent size), anywhere in the chain of causes."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, GuardOnDataDependentSymNode) or "data-dependent" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _first(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
