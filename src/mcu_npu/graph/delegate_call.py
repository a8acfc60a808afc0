"""The one test for a lowered program's delegate call (``executorch_call_delegate``), read by
the report, the boundary repair, the latency estimate and the deployability check."""

from __future__ import annotations


def is_delegate_call(node) -> bool:
    """Whether ``node`` (an FX node) calls a delegate: ExecuTorch's ``executorch_call_delegate``
    higher-order operator."""
    return node.op == "call_function" and "executorch_call_delegate" in str(node.target)
