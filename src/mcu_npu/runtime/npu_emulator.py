"""Host emulation of NPU delegates: the partition's TFLite graph runs in LiteRT.

A reference payload carries that graph. A vendor payload (Neutron microcode) cannot run
anywhere but the chip, so it is refused with an explanation.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np
import torch

from ..errors import InvalidProgramError
from ..payload import is_container, unpack_reference
from .litert import interpreter, run_model


@lru_cache(maxsize=32)
def _prepared(digest: bytes, payload: bytes):
    model, meta = unpack_reference(payload)
    return model, interpreter(model.buffer)


def run_payload(processed: bytes, compile_specs, named_data, inputs) -> list[torch.Tensor]:
    """Execute one NPU delegate call on the host: the payload itself when it is the TFLite
    graph, else the host graph kept beside a vendor payload."""
    from ..backend import host_graph_key

    payload = bytes(processed)
    if not is_container(payload):
        kept = named_data.get(host_graph_key(payload))
        if kept is None:
            raise InvalidProgramError(
                "this program's NPU partitions hold vendor microcode that only the NPU itself "
                "can run; compile with npu_compiler='reference' to check it on the host")
        payload = bytes(kept)
    model, interp = _prepared(hashlib.sha256(payload).digest(), payload)
    if len(inputs) != len(model.inputs):
        raise InvalidProgramError(
            f"NPU delegate expects {len(model.inputs)} inputs, the program passes {len(inputs)}")
    outputs = run_model(model, inputs, interp)
    return [torch.from_numpy(np.ascontiguousarray(o)) for o in outputs]
