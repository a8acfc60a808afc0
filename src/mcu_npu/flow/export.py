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

import logging
import os
import warnings
from pathlib import Path

import torch
from torch.fx import GraphModule
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from ..errors import ConfigError, UnsupportedModelError, source_line, stage, warn_user
from ..upstream.patches import module_calls_unwound_on_error

EXPORT_HINT = ("make the model capturable by torch.export (no data-dependent control flow, "
               "see torch.export's message), or report it")


def export(model: torch.nn.Module, example_inputs: tuple) -> GraphModule:
    """The compile's first stage: ``export_module``, its failures named as the stage's."""
    with stage("exporting the model", EXPORT_HINT):
        return export_module(model, example_inputs)


def export_module(model: torch.nn.Module, example_inputs: tuple) -> GraphModule:
    """torch.export a module into a plain ATen GraphModule, with export's message on failure:
    non-strict, then strict where non-strict stopped on a data-dependent value."""
    example_inputs = tuple(x.contiguous() if isinstance(x, torch.Tensor) else x
                           for x in example_inputs)  # odd strides would read as channels-last
    model = in_eval_mode(model)
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
        warn_user(f"the model was captured by strict torch.export (TorchDynamo): "
                  f"non-strict export stopped on a data-dependent value ({_first(exc)})")
        check_model_outputs(ep)
        try:
            return _specialize(ep.module(check_guards=False), example_inputs)
        except Exception as fixed_exc:
            raise UnsupportedModelError(
                f"strict torch.export captured the model, but putting its data-dependent "
                f"values in as numbers failed: {_first(fixed_exc)}") from fixed_exc
    check_model_outputs(ep)
    return ep.module(check_guards=False)


_SCALARS = (torch.ops.aten.item.default, torch.ops.aten._local_scalar_dense.default)


def _specialize(gm: GraphModule, example_inputs: tuple) -> GraphModule:
    """``gm`` with each ``.item()`` replaced by its value on ``example_inputs``, exported
    again (now without data-dependent values) into a plain graph; a warning for each value
    read from an input."""
    scalars = [n for n in gm.graph.nodes if n.target in _SCALARS]
    values = _values(gm, scalars, example_inputs)
    for node in scalars:
        inputs = _inputs_of(node)
        if inputs:
            warn_user(
                f"{node.name} ({source_line(node)}) reads a value out of the input(s) "
                f"{', '.join(inputs)}; a program has fixed shapes, so it is compiled as "
                f"{values[node]}, its value for the example inputs: the program computes what "
                f"the model does for inputs on which it is {values[node]}")
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
        with module_calls_unwound_on_error():  # a layer call the model catches
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


def in_eval_mode(model):
    """``model`` in eval mode. A module ``torch.export`` made (``ExportedProgram.module()``,
    a loaded ``.pt2``) refuses ``eval()``: it runs as it was captured, and is returned as
    it is."""
    if not isinstance(model, torch.nn.Module):
        return model
    try:
        return model.eval()
    except NotImplementedError:  # torch.export's unlifted module: "Calling eval() is not
        return model             # supported yet"


def exported_model(model, example_inputs) -> tuple:
    """(module, example inputs) of ``compile``'s ``model``: an ``ExportedProgram`` or the
    path of a ``.pt2`` file (``torch.export.save``) becomes its module, its own example
    inputs used when ``example_inputs`` is None; anything else is returned as it is."""
    if isinstance(model, (str, os.PathLike)):
        model = load_pt2(model)
    if isinstance(model, torch.export.ExportedProgram):
        if example_inputs is None:
            example_inputs = tuple(model.example_inputs[0]) if model.example_inputs else None
        model = model.module(check_guards=False)
    return model, example_inputs


def load_pt2(path) -> torch.export.ExportedProgram:
    """The program of a ``.pt2`` file; ConfigError when there is none, UnsupportedModelError
    when it is no torch.export program."""
    path = os.fspath(path)
    if not path.endswith(".pt2"):
        raise ConfigError(f"a model given as a path must be a torch.export .pt2 file, got "
                          f"{path!r}")
    if not Path(path).is_file():
        raise ConfigError(f"model file {path!r} not found")
    log = logging.getLogger("torch.export")  # logs the traceback of what it raises next
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        return torch.export.load(path)
    except Exception as exc:  # torch raises many types on a foreign or corrupt file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsupportedModelError(f"cannot read {path!r} as a torch.export program: "
                                    f"{first}") from exc
    finally:
        log.setLevel(level)


def check_model_outputs(ep: torch.export.ExportedProgram) -> None:
    """A program returns tensors, in order: a model returning a dict, or a None or a
    number among its outputs, is refused before anything is compiled (it would fail only
    when its outputs are first compared)."""
    def dicts(spec):
        if spec.type is dict or (isinstance(spec.type, type) and issubclass(spec.type, dict)):
            yield spec
        for child in spec.children():
            yield from dicts(child)

    found = next(dicts(ep.call_spec.out_spec), None)
    if found is not None:
        keys = ", ".join(repr(k) for k in found.context)
        raise UnsupportedModelError(
            f"the model returns a dict (keys {keys}); a program's outputs are tensors in "
            "order: return a tuple of tensors instead (e.g. tuple(out.values()))")
    out = next(n for n in ep.graph.nodes if n.op == "output")
    for i, value in enumerate(out.args[0]):
        val = value.meta.get("val") if isinstance(value, torch.fx.Node) else value
        if not isinstance(val, torch.Tensor):
            raise UnsupportedModelError(
                f"output {i} of the model is {'None' if val is None else type(val).__name__}"
                "; a program's outputs are tensors: return only the tensors")
