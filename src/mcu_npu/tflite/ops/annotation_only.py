"""The operators the quantizer annotates although no converter takes them: each says why.

Annotating them keeps int8 flowing through them on the CPU (their neighbours on the NPU read
and write int8); every other annotated operator has its entry next to its converter.
"""

from __future__ import annotations

from ..ops_aliases import at
from ..registry import annotated_only

annotated_only(
    at.expand, annotate="shared",
    reason="expand_copy has no converter (TFLite BROADCAST_TO is not implemented); its "
           "output reuses the input's parameters so its int8 neighbours need no requantize",
)
