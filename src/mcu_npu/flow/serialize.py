"""Serialize: the Edge program to the device ``.pte`` bytes and, apart from them, the host
graphs its companion file carries."""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..device.payload import HOST_DATA_TAG
from ..errors import stage
from ..firmware.companion import read_named_data
from ..upstream.patches import to_executorch_without_idle_dim_order_pass


@dataclass(frozen=True)
class DebugMaps:
    """What ExecuTorch's emitter records for the debugging tools while it serializes (the
    attributes of an ``ExecutorchProgramManager`` an ETRecord reads): per instruction its
    debug handles and output count, per delegate call its debug-handle map."""

    debug_handle_map: dict
    delegate_map: dict
    instruction_id_to_num_outs_map: dict


def to_executorch(edge) -> tuple[bytes, dict[str, bytes]]:
    """``serialize(edge)`` without the debug maps."""
    pte, host, _ = serialize(edge)
    return pte, host


def serialize(edge) -> tuple[bytes, dict[str, bytes], DebugMaps]:
    """Serialize an Edge program: (the device ``.pte``, the host graphs by named-data key,
    the emitter's debug maps).
    The host graphs are external data (``device.payload.HOST_DATA_TAG``), which ExecuTorch
    writes as a ``.ptd`` beside the program; they are read back from it. CPU-side
    quantize/dequantize need the quantized kernels' out variants registered first."""
    with stage("serializing the ExecuTorch program"):
        import executorch.kernels.quantized  # noqa: F401  (registers quantized_decomposed.*.out)

        with warnings.catch_warnings():
            # every mutable buffer of ours (a model's state) stores its initial value
            # (``passes.edge.StateAsBuffers``): the emitter's warning that it would not is
            # given for any mutated buffer
            warnings.filterwarnings("ignore", message="Mutation on a buffer in the model is "
                                    "detected", category=UserWarning)
            program = to_executorch_without_idle_dim_order_pass(edge)
        pte = bytes(program.buffer)
        with tempfile.TemporaryDirectory(prefix="mcu_npu_") as tmp:
            program.write_tensor_data_to_file(tmp)
            ptd = Path(tmp, HOST_DATA_TAG + ".ptd")
            host = read_named_data(ptd.read_bytes(), "the host graphs") if ptd.is_file() else {}
    maps = DebugMaps(program.debug_handle_map, program.delegate_map,
                     program.instruction_id_to_num_outs_map)
    return pte, host, maps
