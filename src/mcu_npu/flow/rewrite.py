"""Rewrite: the target's ATen passes turn the exported graph into the ops the target quantizes
and converts, and every node gets the id that follows it to the report (``graph.ids``)."""

from __future__ import annotations

from torch.fx import GraphModule

from ..errors import stage
from ..quantization.composed import TargetQuantizer
from .edge import default_aten_passes


def rewrite(graph: GraphModule, target) -> GraphModule:
    """The stage: ``for_annotation``, its failures named as the stage's."""
    with stage("rewriting the model for quantization"):
        return for_annotation(graph, target)


def for_annotation(graph: GraphModule, target) -> GraphModule:
    """``graph`` as the target's quantizer annotates it: rewritten by ``default_aten_passes``,
    its nodes tagged."""
    return TargetQuantizer(target, aten_passes=default_aten_passes(target)) \
        .transform_for_annotation(graph)
