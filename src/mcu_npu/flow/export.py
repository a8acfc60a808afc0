"""Export: the float model captured by ``torch.export`` as a plain ATen graph."""

from __future__ import annotations

import warnings

import torch
from torch.fx import GraphModule

from ..errors import UnsupportedModelError, stage

EXPORT_HINT = ("make the model capturable by torch.export (no data-dependent control flow, "
               "see torch.export's message), or report it")


def export(model: torch.nn.Module, example_inputs: tuple) -> GraphModule:
    """The compile's first stage: ``export_module``, its failures named as the stage's."""
    with stage("exporting the model", EXPORT_HINT):
        return export_module(model, example_inputs)


def export_module(model: torch.nn.Module, example_inputs: tuple) -> GraphModule:
    """torch.export a module into a plain ATen GraphModule, with export's message on failure."""
    example_inputs = tuple(x.contiguous() if isinstance(x, torch.Tensor) else x
                           for x in example_inputs)  # odd strides would read as channels-last
    try:
        with warnings.catch_warnings():
            # nn.RNN/GRU/LSTM re-list their own parameters in ``_flat_weights`` on every
            # call; export reports that as an attribute assigned during export: nothing the
            # user can or needs to change
            warnings.filterwarnings("ignore", message=r"The tensor attributes .*_flat_weights",
                                    category=UserWarning)
            ep = torch.export.export(model.eval(), example_inputs)
    except Exception as exc:  # torch raises many types; the message is what matters
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsupportedModelError(f"torch.export could not capture the model: {first}") from exc
    check_model_outputs(ep)
    return ep.module(check_guards=False)


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
