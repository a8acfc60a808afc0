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
            ep = torch.export.export(in_eval_mode(model), example_inputs)
    except Exception as exc:  # torch raises many types; the message is what matters
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsupportedModelError(f"torch.export could not capture the model: {first}") from exc
    return ep.module(check_guards=False)


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
