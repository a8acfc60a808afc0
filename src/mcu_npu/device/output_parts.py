"""The model's outputs put back together from a program whose mixed-range outputs were split
into parts (``passes.edge.SplitMixedRangeOutputs``): the recipe is the report's
``program_io["assemble"]``, one expression per model output over the program's outputs.
A firmware reads the parts as they are (boxes, scores, ... each with its own parameters)."""

from __future__ import annotations

import torch


def assemble(recipe: list | None, outputs: list) -> list:
    """The model's outputs from the program's ``outputs``; ``outputs`` when ``recipe`` is
    empty (no output was split)."""
    if not recipe:
        return outputs
    return [_value(expr, outputs) for expr in recipe]


def _value(expr: dict, outputs: list) -> torch.Tensor:
    if "part" in expr:
        return outputs[expr["part"]]
    if "cat" in expr:
        return torch.cat([_value(e, outputs) for e in expr["cat"]], expr["dim"])
    if "view" in expr:
        return _value(expr["view"], outputs).reshape(expr["shape"])
    return _value(expr["permute"], outputs).permute(expr["dims"]).contiguous()
