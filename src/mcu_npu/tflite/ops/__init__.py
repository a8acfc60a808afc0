"""Operator converters, one module per operator family; importing registers them all."""

from . import (  # noqa: F401
    activations,
    concat_split,
    constants,
    conv,
    elementwise,
    linear,
    pad,
    pooling,
    reduce,
    shape,
)
