"""Export: the float model captured by ``torch.export`` as a plain ATen graph."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import torch
from torch.fx import GraphModule

from ..errors import ConfigError, UnsupportedModelError, stage

EXPORT_HINT = ("make the model capturable by torch.export (no data-dependent control flow, "
               "see torch.export's message), or report it")


def export(model: torch.nn.Module, example_inputs: tuple) -> GraphModule:
    """The compile's first stage: ``export_module``, its failures named as the stage's."""
    with stage("exporting the model", EXPORT_HINT):
        return export_module(model, example_inputs)


def export_module(model: torch.nn.Module, example_inputs: tuple) -> GraphModule:
    """torch.export a module into a plain ATen GraphModule, with export's message on failure.

    Non-strict export first; where it fails on a data-dependent value (``int(t.item())``,
    which strict export's bytecode tracing may still capture), strict export is tried before
    giving up. The graph's ``meta[CAPTURED_BY]`` says which one captured the model."""
    example_inputs = tuple(x.contiguous() if isinstance(x, torch.Tensor) else x
                           for x in example_inputs)  # odd strides would read as channels-last
    model = in_eval_mode(model)
    try:
        ep = _export(model, example_inputs, strict=False)
        captured = "non-strict torch.export"
    except Exception as exc:  # torch raises many types; the message is what matters
        if not data_dependent(exc):
            raise UnsupportedModelError(
                f"torch.export could not capture the model: {_first(exc)}") from exc
        try:
            ep = _export(model, example_inputs, strict=True)
        except Exception as strict_exc:  # noqa: BLE001
            raise UnsupportedModelError(
                f"torch.export could not capture the model: {_first(exc)} (non-strict); "
                f"{_first(strict_exc)} (strict)") from exc
        captured = (f"strict torch.export (non-strict export failed on a data-dependent "
                    f"value: {_first(exc)})")
        ep = _with_constant_items_folded(ep, example_inputs)
    check_model_outputs(ep)
    gm = ep.module(check_guards=False)
    gm.meta[CAPTURED_BY] = captured
    return gm


CAPTURED_BY = "mcu_npu_captured_by"
"""The GraphModule meta key saying which ``torch.export`` mode captured the model."""


def _export(model: torch.nn.Module, example_inputs: tuple, strict: bool):
    with warnings.catch_warnings():
        # nn.RNN/GRU/LSTM re-list their own parameters in ``_flat_weights`` on every
        # call; export reports that as an attribute assigned during export: nothing the
        # user can or needs to change
        warnings.filterwarnings("ignore", message=r"The tensor attributes .*_flat_weights",
                                category=UserWarning)
        return torch.export.export(model, example_inputs, strict=strict)


def _with_constant_items_folded(ep, example_inputs: tuple):
    """``ep`` with each ``aten.item`` whose value depends on no input's values (computed from
    constants and input shapes alone, as ``int(lengths.max().item())`` of a length tensor
    made from the input's shape) replaced by that number and exported again, so later
    stages see static shapes; ``ep`` itself where an item reads input data."""
    gm = ep.module(check_guards=False)
    items = [n for n in gm.graph.nodes if n.target is torch.ops.aten.item.default]
    if not items or not all(_reads_no_input_values(n) for n in items):
        return ep
    values = {}

    class _Recording(torch.fx.Interpreter):
        def run_node(self, n):
            value = super().run_node(n)
            if n.target is torch.ops.aten.item.default:
                values[n] = value
            return value

    try:
        with torch.no_grad():
            _Recording(gm).run(*example_inputs)
        for node in items:
            for user in list(node.users):
                user.args = torch.fx.node.map_arg(user.args,
                                                  lambda a, n=node: values[n] if a is n else a)
                user.kwargs = torch.fx.node.map_arg(
                    user.kwargs, lambda a, n=node: values[n] if a is n else a)
        for node in list(gm.graph.nodes):  # the range checks of the folded values
            if node.target is torch.ops.aten._assert_scalar.default:
                gm.graph.erase_node(node)
        gm.graph.eliminate_dead_code()
        gm.recompile()
        return _export(gm, example_inputs, strict=False)
    except Exception:  # noqa: BLE001  (then the strict graph goes on as it is)
        return ep


def _reads_no_input_values(node) -> bool:
    """Whether ``node`` is computed from constants and input shapes (``sym_size``) only."""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            return False
        if n.target is torch.ops.aten.sym_size.int:
            continue
        todo.extend(n.all_input_nodes)
    return True


def data_dependent(exc: BaseException) -> bool:
    """Whether an export failure is a guard on a data-dependent value (an ``.item()`` read
    as a Python number): the failure strict export may not have."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    seen = exc
    while seen is not None:
        if isinstance(seen, GuardOnDataDependentSymNode) or "data-dependent" in str(seen):
            return True
        seen = seen.__cause__
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
