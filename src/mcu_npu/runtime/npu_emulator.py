"""Host emulation of NPU delegates: the device runtime's data movement, then the partition's
TFLite graph in LiteRT standing in for the NPU.

Each emulator copies delegate inputs and outputs exactly as its device runtime does (the
layouts in ``device.delegate_io``, the element rules in its NPU family's ``io``) and applies
the runtime's checks and refusals; nothing else moves or converts data. So a program whose
partition graph expects another layout than the runtime hands it computes wrong numbers here,
as it would on the board.

- ``run_ethos_u`` follows ``EthosUBackend.cpp``: per Vela input record (argument ``i``) the
  element type must match the record's element size (int8/uint8/bool 1, int16 2, int32 4;
  anything else, float included, is refused), the bytes are copied in the tensor's memory
  order, the element counts must match; outputs are copied back when the byte counts match.
  It is ``run_copying`` with the Ethos-U family's rules; another family whose runtime copies
  tensors as they lie registers ``run_copying`` with its own (``runtime.register_emulator``).
- ``run_neutron`` follows ``NeutronBackend.cpp``: inputs and outputs go through the payload's
  argument maps, and are transposed on the CPU only where the format flag says so.

A vendor payload's graph comes from the named data kept beside it; a reference payload is
the graph (for Ethos-U its tensors stand for Vela's records, for Neutron its metadata holds
the format flags a Neutron payload would carry).

``recording_tensors()`` (opt-in, for per-layer error) makes each delegate call run its graph
in an interpreter that keeps every intermediate tensor and hands them out by tensor name;
outside it nothing is recorded and the cached interpreters run as usual.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from ..device.delegate_io import NpuTensor, neutron_layout, to_npu
from ..errors import HostDataMissingError, InvalidProgramError
from ..npu import ethos_u, neutron
from ..npu.ethos_u import payload as bin_stream
from ..npu.neutron.payload import neutron_io
from ..device.payload import find_host_graph, is_container, unpack_reference
from .delegates import DeviceTensor
from .litert import TensorValue, interpreter, op_outputs


@lru_cache(maxsize=32)
def _prepared(digest: bytes, payload: bytes):
    model, meta = unpack_reference(payload)
    return model, meta, interpreter(model.buffer)


@lru_cache(maxsize=8)
def _prepared_keeping_tensors(digest: bytes, payload: bytes):
    model, meta = unpack_reference(payload)
    return model, meta, interpreter(model.buffer, keep_all_tensors=True)


_RECORDINGS: list[list[dict[str, TensorValue]]] = []


@contextlib.contextmanager
def recording_tensors():
    """Record the NPU graphs' tensors while the block runs: yields a list that gets, per
    delegate call in execution order, ``{tensor name: TensorValue}`` of every operator
    output of the partition's TFLite graph (tensor names are the Edge nodes' names).
    The numbers computed are the same as without recording."""
    calls: list[dict[str, TensorValue]] = []
    _RECORDINGS.append(calls)
    try:
        yield calls
    finally:
        _RECORDINGS.pop()


def _record(model, interp) -> None:
    if _RECORDINGS:
        _RECORDINGS[-1].append(op_outputs(model.buffer, interp))


def npu_compute(interp, inputs: "list[tuple[int, np.ndarray]]", outputs: "list[int]",
                what: str) -> list[np.ndarray]:
    """The NPU's compute alone: each input region's bytes into graph tensor ``index``
    (``inputs``: (index, bytes)), the graph run, each output tensor's bytes (flat) back."""
    for k, (index, memory) in enumerate(inputs):
        _feed(interp, index, memory, f"{what} input {k}")
    interp.invoke()
    return [_result(interp, index) for index in outputs]


def npu_graph(processed: bytes, named_data: dict[str, bytes]):
    """(TFLiteModel, meta, interpreter) of the partition graph behind a payload."""
    payload = processed
    if not is_container(payload):
        kept = find_host_graph(named_data, payload)
        if kept is None:
            raise HostDataMissingError(
                "this program's NPU partitions hold vendor microcode that only the NPU itself "
                "runs; the host runs the graphs its companion file (.ptd) keeps, which was "
                "not given")
        payload = bytes(kept)
    prepare = _prepared_keeping_tensors if _RECORDINGS else _prepared
    return prepare(hashlib.sha256(payload).digest(), payload)


@dataclass(frozen=True)
class NpuRecord:
    """One NPU input or output as the runtime knows it: element count, element size and
    (Ethos-U) its byte offset in the NPU's scratch area."""

    count: int
    elem_size: int
    offset: int = 0

    @property
    def nbytes(self) -> int:
        return self.count * self.elem_size


def _tensor_detail(interp, index: int) -> dict:
    """Shape and dtype of a graph input or output: read from the interpreter's I/O details,
    not from the details of every tensor in the graph (thousands in a recurrent one)."""
    return next(d for d in (*interp.get_input_details(), *interp.get_output_details())
                if d["index"] == index)


def npu_tensor(interp, index: int) -> NpuTensor:
    """Element count and size of a graph input or output: the NPU tensor a delegate
    argument is copied into or out of."""
    detail = _tensor_detail(interp, index)
    return NpuTensor(math.prod(int(d) for d in detail["shape"]),
                     np.dtype(detail["dtype"]).itemsize)


def _feed(interp, index: int, memory: np.ndarray, what: str) -> None:
    """Put raw bytes into a TFLite input tensor, as the NPU reads its input region."""
    detail = _tensor_detail(interp, index)
    dtype, shape = np.dtype(detail["dtype"]), tuple(int(d) for d in detail["shape"])
    raw = np.ascontiguousarray(memory).reshape(-1).view(np.uint8)
    if raw.size != math.prod(shape) * dtype.itemsize:
        raise InvalidProgramError(f"{what}: {raw.size} bytes reach an NPU input of "
                                  f"{math.prod(shape) * dtype.itemsize} bytes")
    interp.set_tensor(index, raw.view(dtype).reshape(shape))


def _result(interp, index: int) -> np.ndarray:
    """A TFLite output tensor's bytes, flat, as the NPU leaves them in its output region."""
    return np.ascontiguousarray(interp.get_tensor(index)).reshape(-1)


def _check_arity(kind: str, inputs: list, outputs: list, n_in: int, n_out: int) -> None:
    if (len(inputs), len(outputs)) != (n_in, n_out):
        raise InvalidProgramError(
            f"NPU delegate expects {n_in} inputs and {n_out} outputs ({kind} payload), the "
            f"program passes {len(inputs)} inputs and {len(outputs)} outputs")


def ethos_u_layout(processed: bytes, model,
                   interp) -> tuple[int, list[NpuRecord], list[NpuRecord]]:
    """(scratch size, input records, output records) of an Ethos-U payload: Vela's records,
    or for a reference payload its graph's inputs then outputs, each at the next 16-byte
    boundary of the scratch area."""
    if is_container(processed):
        offset, records = 0, []
        for spec in (*model.inputs, *model.outputs):
            detail = _tensor_detail(interp, spec.index)
            record = NpuRecord(math.prod(int(d) for d in detail["shape"]),
                               np.dtype(detail["dtype"]).itemsize, offset)
            records.append(record)
            offset += (record.nbytes + 15) // 16 * 16
        n_in = len(model.inputs)
        return offset, records[:n_in], records[n_in:]
    stream = bin_stream.parse(processed)

    def records(ios):
        return [NpuRecord(math.prod(io.shape), io.elem_size, io.offset) for io in ios]
    return stream.scratch_size, records(stream.inputs), records(stream.outputs)


def run_copying(family, processed: bytes, compile_specs, named_data,
                inputs: list[DeviceTensor], outputs: list[DeviceTensor]) -> None:
    """One delegate call of a runtime that copies each tensor as it lies
    (``EthosUBackend.cpp``): memcpy in, NPU (LiteRT), memcpy out, each tensor checked by
    ``family``'s rules (``NpuFamily.input_problem``, ``output_problem``) against the NPU
    tensors its payload declares (``NpuFamily.npu_tensors``)."""
    processed = bytes(processed)
    model, _, interp = npu_graph(processed, named_data)
    npu = family.npu_tensors(processed, model)
    in_records, out_records = ([NpuTensor(*t) for t in npu[k]] for k in ("inputs", "outputs"))
    _check_arity(family.backend_id, inputs, outputs, len(in_records), len(out_records))
    if (len(model.inputs), len(model.outputs)) != (len(in_records), len(out_records)):
        raise InvalidProgramError(f"the {family.backend_id} payload's inputs and outputs "
                                  "differ from its partition graph's")
    for i, (arg, record, spec) in enumerate(zip(inputs, in_records, model.inputs)):
        problem = family.input_problem(i, arg.tensor.dtype, arg.tensor.numel(), record)
        if problem is not None:
            raise InvalidProgramError(problem)
        _feed(interp, spec.index, arg.memory(), f"{family.backend_id} input {i}")
    interp.invoke()
    _record(model, interp)
    for i, (arg, record, spec) in enumerate(zip(outputs, out_records, model.outputs)):
        problem = family.output_problem(i, arg.tensor.dtype, arg.tensor.numel(), record)
        if problem is not None:
            raise InvalidProgramError(problem)
        arg.write_memory(_result(interp, spec.index))


def run_ethos_u(processed: bytes, compile_specs, named_data, inputs: list[DeviceTensor],
                outputs: list[DeviceTensor]) -> None:
    """One Ethos-U delegate call (``run_copying`` by the Ethos-U rules)."""
    run_copying(ethos_u.FAMILY, processed, compile_specs, named_data, inputs, outputs)


def run_neutron(processed: bytes, compile_specs, named_data, inputs: list[DeviceTensor],
                outputs: list[DeviceTensor]) -> None:
    """One Neutron delegate call: flagged transposes in, NPU (LiteRT), flagged transposes out."""
    processed = bytes(processed)
    model, meta, interp = npu_graph(processed, named_data)
    io = neutron_io(processed, model, meta)
    if io.num_input_args != len(inputs):
        raise InvalidProgramError(f"the Neutron payload declares {io.num_input_args} input "
                                  f"arguments, the program passes {len(inputs)}")
    for i, (flag, arg_index) in enumerate(zip(io.input_formats, io.input_map)):
        arg = inputs[arg_index]
        problem = neutron.FAMILY.input_problem(i, arg.tensor.dtype, arg.tensor.numel(),
                                               npu_tensor(interp, model.inputs[arg_index].index))
        if problem is not None:
            raise InvalidProgramError(problem)
        order = neutron_layout(arg.sizes, arg.dim_order, flag, f"Neutron input {i}")
        data = to_npu(arg.memory(), arg.sizes, arg.dim_order, order)
        _feed(interp, model.inputs[arg_index].index, data, f"Neutron input {i}")
    interp.invoke()
    _record(model, interp)
    for i, (flag, out_index) in enumerate(zip(io.output_formats, io.output_map)):
        if out_index >= len(outputs):
            raise InvalidProgramError(f"Neutron output {i} maps to argument "
                                      f"{io.num_input_args + out_index}, past the call's")
        arg = outputs[out_index]
        problem = neutron.FAMILY.output_problem(
            i, arg.tensor.dtype, arg.tensor.numel(),
            npu_tensor(interp, model.outputs[out_index].index))
        if problem is not None:
            raise InvalidProgramError(problem)
        order = neutron_layout(arg.sizes, arg.dim_order, flag, f"Neutron output {i}")
        result = _result(interp, model.outputs[out_index].index)
        if result.size * result.itemsize != arg.nbytes:
            raise InvalidProgramError(f"Neutron output {i}: the NPU writes "
                                      f"{result.size * result.itemsize} bytes into a "
                                      f"{arg.nbytes}-byte tensor")
        element = torch.empty(0, dtype=arg.tensor.dtype).numpy().dtype
        arg.write_memory(to_npu(result.view(np.uint8).view(element), arg.sizes, order,
                                arg.dim_order))
