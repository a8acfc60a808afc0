"""Export: the float model captured by ``torch.export`` as a plain ATen graph."""

from __future__ import annotations

import torch
from torch.fx import GraphModule

from ..errors import stage
from .edge import export_module

EXPORT_HINT = ("make the model capturable by torch.export (no data-dependent control flow, "
               "see torch.export's message), or report it")


def export(model: torch.nn.Module, example_inputs: tuple) -> GraphModule:
    """The compile's first stage: ``export_module``, its failures named as the stage's."""
    with stage("exporting the model", EXPORT_HINT):
        return export_module(model, example_inputs)
