"""The payload the ExecuTorch Neutron runtime (NeutronBackend.cpp) reads.

Layout: ``header | microcode | weights | kernels``, each part zero-padded to 16 bytes. The
header has one byte per field: number of Neutron inputs and outputs, number of delegate
input arguments, a format flag per input and output (1 = channels last, the runtime
transposes NCHW <-> NHWC; 0 = as is), the argument index of each input and output, and the
payload version. ``parse`` applies the checks the runtime applies at init, so a payload that
parses here is one the device accepts; every refusal reads "not a Neutron payload: ...".
docs/payload.md has the byte-level tables.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ...errors import InvalidProgramError

ALIGN = 16
MAGIC = 0x64434D6E
FORMATLESS = 0
CHANNELS_LAST = 1
VERSIONS = (0, 1)
"""0: plain microcode; 1: microcode with profile and debug outputs."""
NOT_NEUTRON = "not a Neutron payload"

# Word positions in the microcode header, per payload version.
_WORDS = {
    0: {"scratch": 9, "sram_scratch": 10, "inputs": 11, "outputs": 12},
    1: {"scratch": 9, "profile": 10, "debug": 11, "sram_scratch": 12, "inputs": 13, "outputs": 14},
}


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _padded(data: bytes) -> bytes:
    return data + b"\0" * (align(len(data)) - len(data))


@dataclass(frozen=True, kw_only=True)
class MicrocodeInfo:
    """The words of the microcode header the runtime reads."""

    microcode_size: int
    weights_size: int
    scratch_size: int
    sram_scratch_size: int
    profile_size: int
    debug_size: int
    num_inputs: int
    num_outputs: int


def microcode_info(microcode: bytes, version: int) -> MicrocodeInfo:
    """Read the microcode header as the runtime's init does, in its order (the magic word,
    then the payload version); InvalidProgramError ("not a Neutron payload: ...") where the
    runtime returns ``Error::InvalidProgram``."""
    if len(microcode) < 4:
        raise InvalidProgramError(f"{NOT_NEUTRON}: no microcode after the header")
    magic = struct.unpack_from("<I", microcode)[0]
    if magic != MAGIC:
        raise InvalidProgramError(f"{NOT_NEUTRON}: the microcode magic is {magic:#010x}, "
                                  f"expected {MAGIC:#010x}")
    if version not in _WORDS:
        raise InvalidProgramError(f"{NOT_NEUTRON}: unknown payload version {version} "
                                  f"(the runtime reads {', '.join(map(str, VERSIONS))})")
    words = _WORDS[version]
    count = max(words.values()) + 1
    if len(microcode) < 4 * count:
        raise InvalidProgramError(f"{NOT_NEUTRON}: the microcode is {len(microcode)} bytes, "
                                  f"shorter than its {4 * count}-byte header")
    w = struct.unpack_from(f"<{count}I", microcode)
    return MicrocodeInfo(
        microcode_size=w[6], weights_size=w[7], scratch_size=w[words["scratch"]],
        sram_scratch_size=w[words["sram_scratch"]],
        profile_size=w[words["profile"]] & 0x7FFFFFFF if "profile" in words else 0,
        debug_size=w[words["debug"]] if "debug" in words else 0,
        num_inputs=w[words["inputs"]], num_outputs=w[words["outputs"]],
    )


@dataclass(frozen=True, kw_only=True)
class NeutronPayload:
    """The fields of one payload. Formats and maps are in Neutron input / output order."""

    num_input_args: int
    input_formats: tuple[int, ...]
    output_formats: tuple[int, ...]
    input_map: tuple[int, ...]
    output_map: tuple[int, ...]
    version: int
    microcode: bytes
    weights: bytes
    kernels: bytes

    def header(self) -> bytes:
        """The header bytes (unpadded); ValueError when a field does not fit its byte."""
        if len(self.input_formats) != len(self.input_map) or \
                len(self.output_formats) != len(self.output_map):
            raise ValueError("each Neutron input and output needs one format and one map entry")
        fields = (len(self.input_map), len(self.output_map), self.num_input_args,
                  *self.input_formats, *self.output_formats, *self.input_map,
                  *self.output_map, self.version)
        if any(not 0 <= f < 256 for f in fields):
            raise ValueError("the Neutron payload header holds at most 255 inputs, outputs "
                             "and argument indices")
        if any(f not in (FORMATLESS, CHANNELS_LAST)
               for f in self.input_formats + self.output_formats):
            raise ValueError("Neutron tensor formats are 0 (formatless) or 1 (channels last)")
        if any(i >= self.num_input_args for i in self.input_map):
            raise ValueError("an input map entry points past the delegate's input arguments")
        if self.version not in VERSIONS:
            raise ValueError(f"Neutron payload version {self.version} is not one of {VERSIONS}")
        return bytes(fields)


def compose(payload: NeutronPayload) -> bytes:
    """``header | microcode | weights | kernels``, each zero-padded to 16 bytes."""
    parts = (payload.header(), payload.microcode, payload.weights, payload.kernels)
    return b"".join(_padded(bytes(p)) for p in parts)


def parse(blob: bytes) -> NeutronPayload:
    """Read a payload the way the runtime does; InvalidProgramError where the runtime fails.

    The payload does not record the kernels' size: ``kernels`` is the rest of the blob,
    including its zero padding.
    """
    blob = bytes(blob)
    if len(blob) < 4:
        raise InvalidProgramError(f"{NOT_NEUTRON}: shorter than its header")
    n_in, n_out, n_args = blob[0], blob[1], blob[2]
    header_size = 4 + 2 * n_in + 2 * n_out
    if len(blob) < header_size:
        raise InvalidProgramError(f"{NOT_NEUTRON}: its header is truncated")
    fields = blob[3:header_size]
    version = fields[-1]
    start = align(header_size)
    info = microcode_info(blob[start:], version)
    if (info.num_inputs, info.num_outputs) != (n_in, n_out):
        raise InvalidProgramError(
            f"{NOT_NEUTRON}: the header declares {n_in} inputs / {n_out} outputs, the "
            f"microcode {info.num_inputs} / {info.num_outputs}")
    weights_at = start + align(info.microcode_size)
    kernels_at = weights_at + align(info.weights_size)
    if kernels_at > len(blob):
        raise InvalidProgramError(f"{NOT_NEUTRON}: shorter than its microcode and weights")
    return NeutronPayload(
        num_input_args=n_args,
        input_formats=tuple(fields[:n_in]),
        output_formats=tuple(fields[n_in:n_in + n_out]),
        input_map=tuple(fields[n_in + n_out:2 * n_in + n_out]),
        output_map=tuple(fields[2 * n_in + n_out:2 * n_in + 2 * n_out]),
        version=version,
        microcode=blob[start:start + info.microcode_size],
        weights=blob[weights_at:weights_at + info.weights_size],
        kernels=blob[kernels_at:],
    )


@dataclass(frozen=True)
class NeutronIO:
    input_formats: tuple[int, ...]
    output_formats: tuple[int, ...]
    input_map: tuple[int, ...]
    output_map: tuple[int, ...]
    num_input_args: int


def neutron_io(processed: bytes, model, meta) -> NeutronIO:
    """The format flags, argument maps and input-argument count of a Neutron payload; of a
    reference payload (``model`` and ``meta``: its graph and metadata), those it records."""
    from ...device.payload import is_container

    if is_container(processed):
        formats = meta.get("neutron_formats")
        if formats is None:
            raise InvalidProgramError("the Neutron delegate's payload records no format flags "
                                      "(it was compiled for another NPU)")
        return NeutronIO(tuple(formats["inputs"]), tuple(formats["outputs"]),
                         tuple(range(len(model.inputs))), tuple(range(len(model.outputs))),
                         len(model.inputs))
    fields = parse(processed)
    return NeutronIO(fields.input_formats, fields.output_formats, fields.input_map,
                     fields.output_map, fields.num_input_args)


def input_count(processed: bytes, named_data) -> int:
    """How many leading delegate arguments are inputs: ``NeutronBackend.cpp`` reads inputs
    through ``inputMap`` and outputs at ``args[numInputArgs + outputMap[i]]``, the count
    from the payload's header (a reference payload's graph: its inputs)."""
    from ...device.payload import is_container, unpack_reference

    processed = bytes(processed)
    if not is_container(processed):
        return parse(processed).num_input_args
    model, meta = unpack_reference(processed)
    return neutron_io(processed, model, meta).num_input_args
