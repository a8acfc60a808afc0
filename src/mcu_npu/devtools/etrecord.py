"""The ETRecord of a compile: what ExecuTorch's ``Inspector`` joins with an ETDump.

It holds, as ExecuTorch's own flow records them:

- the Edge program before delegation (quantize / dequantize and the ops in PyTorch): every
  compute node with its debug handle, the delegated ones included, and its module path and
  torch function (``nn_module_stack``, ``torch_fn``: ``graph.module_names``). ``Inspector``
  names the ETDump's events from it and ``calculate_numeric_gap`` runs it as the reference;
- the program's debug-handle map (instruction -> handles), its delegate map (per delegate
  call: backend name and the debug-handle map its ``preprocess`` returned,
  ``backend.debug_handles``) and each instruction's output count, as ExecuTorch's emitter
  recorded them while it wrote the device ``.pte`` (``flow.serialize.DebugMaps``);
- representative inputs (the compile's example inputs) for ``calculate_numeric_gap``, and
  as their reference outputs the float model's outputs on them, which ``compare_results``
  (``inspector_cli --compare_results``) sets beside a run marked as of that input
  (``run(..., bundled_input_index=0)``).

Nothing of it goes into the device program.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import torch

from ..errors import InvalidProgramError
from ..firmware.files import write_atomic


def etrecord_bytes(edge_before, maps, inputs, expected=None) -> bytes:
    """The ETRecord (a zip file) of a compiled program: ``edge_before`` the Edge program
    manager before delegation, ``maps`` the emitter's debug maps of the ``.pte``
    (``flow.serialize.DebugMaps``), ``inputs`` the representative inputs (a tuple of
    tensors), ``expected`` the float model's outputs on them (a tensor or a sequence)."""
    from executorch.devtools.etrecord import ETRecord

    if maps is None or not maps.debug_handle_map:
        raise InvalidProgramError("the program carries no debug maps to record (it was "
                                  "compiled without etrecord=)")
    record = ETRecord()
    record.add_edge_dialect_program(edge_before)
    record.add_executorch_program(maps)
    record.update_representative_inputs([_detached(x) for x in inputs])
    if expected is not None:
        outputs = [expected] if isinstance(expected, torch.Tensor) else list(expected)
        record.update_reference_outputs({"forward": [[_detached(y) for y in outputs]]})
    out = io.BytesIO()
    record.save(out)
    return out.getvalue()


def write_etrecord(path: str | os.PathLike, edge_before, maps, inputs, expected=None) -> Path:
    """Write ``etrecord_bytes(...)`` to ``path`` (whole or not at all)."""
    return write_atomic(path, etrecord_bytes(edge_before, maps, inputs, expected))


def _detached(x):
    return x.detach().clone() if isinstance(x, torch.Tensor) else x
