"""A line-by-line transcription of ``NeutronBackend::init`` (ExecuTorch
backends/nxp/runtime/NeutronBackend.cpp): the checks the device applies to a delegate's
processed bytes before ``neutronModelPrepare``. Independent of mcu_npu's payload reader, so
tests can hold that reader (and the reference payload) against the device's own logic.

``init`` returns ``(error, log)``: ``error`` is "Ok" or "InvalidProgram", ``log`` the
``ET_LOG(Error, ...)`` message. A read past the end of the buffer, undefined on the device,
is returned as ("OutOfBounds", where).
"""

from __future__ import annotations

import struct

INPUT_TENSOR_FORMAT_LEN_POS = 0
OUTPUT_TENSOR_FORMAT_LEN_POS = 1
INPUT_ARGS_LEN_POS = 2
BUFFER_ALIGNMENT = 16


def ALIGN_SIZE(size: int) -> int:  # noqa: N802  (the C macro's name)
    return (size + BUFFER_ALIGNMENT - 1) & ~(BUFFER_ALIGNMENT - 1)


def init(processed: bytes) -> tuple[str, str]:
    base = bytes(processed)
    if len(base) < 3:
        return "OutOfBounds", "header lengths"
    num_inputs = base[INPUT_TENSOR_FORMAT_LEN_POS]
    num_outputs = base[OUTPUT_TENSOR_FORMAT_LEN_POS]
    version_at = 3 + 2 * num_inputs + 2 * num_outputs  # PAYLOAD_VERSION_ADDR
    if version_at >= len(base):
        return "OutOfBounds", "payload version"
    payload_version = base[version_at]
    payload_at = ALIGN_SIZE(4 + 2 * num_inputs + 2 * num_outputs)  # PAYLOAD_ADDR

    def word(i: int) -> int | None:
        at = payload_at + 4 * i
        return struct.unpack_from("<I", base, at)[0] if at + 4 <= len(base) else None

    magic = word(0)
    if magic is None:
        return "OutOfBounds", "microcode magic"
    if magic != 0x64434D6E:
        return "InvalidProgram", "Preprocessed buffer does not contain a valid Neutron microcode"
    microcode_size, weights_size = word(6), word(7)
    if payload_version == 0:
        cfg_inputs, cfg_outputs = word(11), word(12)
    elif payload_version == 1:
        cfg_inputs, cfg_outputs = word(13), word(14)
    else:
        return "InvalidProgram", (f"Unknown payload version {payload_version}. Please update "
                                  "the backend")
    if None in (microcode_size, weights_size, cfg_inputs, cfg_outputs):
        return "OutOfBounds", "microcode header"
    if cfg_inputs != num_inputs:
        return "InvalidProgram", "Preprocessed buffer does not contain a valid number of inputs"
    if cfg_outputs != num_outputs:
        return "InvalidProgram", ("Preprocessed buffer does not contain a valid number of "
                                  "outputs")
    kernels_at = payload_at + ALIGN_SIZE(microcode_size) + ALIGN_SIZE(weights_size)
    if kernels_at > len(base):
        return "OutOfBounds", "microcode and weights"
    return "Ok", ""
