"""An ETDump of a host run, in ExecuTorch's format, for its ``Inspector``.

The host runtime (``runtime.pte``) calls an observer after every instruction; ``Recorder``
turns each into the events ExecuTorch's runtime logs (``runtime/executor/method.cpp``,
``program.cpp``, the generated kernel wrappers, ``devtools/etdump/etdump_flatcc.cpp``), in
the order it logs them (an event is written when it ends):

- a block "Default" with the method load: ``Method::init`` inside ``Program::load_method``;
- a block "Execute" with the run: per kernel instruction ``native_call_<op>.<overload>``
  inside ``OPERATOR_CALL``; per delegate instruction one profile event per operator of the
  partition's TFLite graph, keyed (no name, as a delegate logs them) by the identifiers of
  the delegate's debug-handle map (``npu_ops``), inside ``DELEGATE_CALL``; all keyed by
  chain and instruction id; ``Method::execute`` around them all;
- with a debug buffer, one debug event per kernel with its output tensor and per NPU
  operator whose output is an Edge node's value with that output, dequantized to float
  and, for a 4-D tensor, turned from the NPU's NHWC back to PyTorch's NCHW (what
  ``calculate_numeric_gap`` compares with the ETRecord's reference), and the program's
  outputs after ``Method::execute``.

Times are not measured: they are the compile's latency model (``report.latency``), in
nanoseconds. A CPU instruction gets its kernel's row, a delegate call its NPU row plus the
device runtime's copies around it; the NPU row is split over the partition's operators in
proportion to each operator's bound (the larger of its MACs at the NPU's MACs per cycle and
its bytes at the NPU's bandwidth). The NPU operators' events say so in their delegate
metadata (the runtime writes metadata on delegate events only); the method load takes no
time.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import McuNpuError
from ..firmware.files import write_all
from ..device.npu_ops import NpuOp, computes_edge_value, npu_ops

RUN_NAME = "Execute"
"""The event block of a run (``Method::execute``)."""
LOAD_NAME = "Default"
"""The event block of the method load (``Program::load_method``)."""
_UNSET_CHAIN, _UNSET_HANDLE = -1, 0  # the runtime's kUnsetChainId, kUnsetDebugHandle
_ALIGN = 64  # the device runtime's debug buffer alignment


@dataclass
class _Event:
    """A profile event (``name``, or ``delegate_id`` for a delegate's own event, which has
    no name) and, with ``value``, a debug event logged before it ends."""

    name: str | None
    chain: int
    instruction: int
    start: int
    end: int
    delegate_id: str = ""
    metadata: str = ""
    value: torch.Tensor | None = None


class Timing:
    """Per-instruction time estimates (ns) from a report's latency rows, matched to the
    program's instructions in order."""

    def __init__(self, report):
        latency = (report.latency if report is not None else None) or {}
        rows = latency.get("rows", [])
        self.cpu = [r for r in rows if not r["node"].startswith("npu partition")]
        self.npu = {}
        self.io = {}
        for r in rows:
            if r["node"].startswith("npu partition"):
                k = int(r["node"].split()[2])
                if r["runs_on"] == "npu":
                    self.npu[k] = r
                else:
                    self.io.setdefault(k, []).append(r)
        self._cursor = 0
        self._delegates = 0
        self.target = _target(report)

    def kernel(self, op: str) -> tuple[int, str]:
        """(ns, basis) of the next kernel instruction calling ``op`` (``ns::name``)."""
        label = op.replace("::", ".")
        for i in range(self._cursor, len(self.cpu)):
            if self.cpu[i]["op"] == label:
                self._cursor = i + 1
                return _ns(self.cpu[i]["us"]), self.cpu[i]["basis"]
        return 0, "no latency-model row (does no work, or not estimated)"

    def delegate(self) -> tuple[int, int, int, str]:
        """(input copy ns, NPU ns, output copy ns, basis) of the next delegate call."""
        k = self._delegates
        self._delegates += 1
        npu = self.npu.get(k)
        if npu is None:
            return 0, 0, 0, "no latency-model row for this delegate"
        moves = self.io.get(k, [])
        ins = sum(_ns(r["us"]) for r in moves if " input " in r["node"])
        outs = sum(_ns(r["us"]) for r in moves if " output " in r["node"])
        return ins, _ns(npu["us"]), outs, npu["basis"]

    def split(self, ops: list[NpuOp], total: int) -> list[int]:
        """``total`` ns over ``ops`` in proportion to each operator's bound."""
        if not ops or total == 0:
            return [0] * len(ops)
        if self.target is None:  # no NPU figures: MACs and bytes weigh alike
            bounds = [max(op.macs, op.nbytes, 1) for op in ops]
        else:
            npu = self.target.npu
            bandwidth = npu.bytes_per_cycle
            bounds = [max(op.macs / npu.macs_per_cycle, op.nbytes / bandwidth, 1.0)
                      for op in ops]
        scale = total / sum(bounds)
        times = [int(b * scale) for b in bounds]
        times[-1] += total - sum(times)
        return times


def _target(report):
    from ..targets import get_target

    name = (report.summary or {}).get("target") if report is not None else None
    try:
        return get_target(name) if name else None
    except McuNpuError:
        return None


def _ns(us: float) -> int:
    return int(round(float(us) * 1000))


class Recorder:
    """The observer the host runtime calls after each instruction (``runtime.pte``); it
    collects the run's events. ``intermediates``: also record output tensors."""

    def __init__(self, report, named_data: dict[str, bytes], intermediates: bool):
        self.timing = Timing(report)
        self.named_data = named_data
        self.intermediates = intermediates
        self.events: list[_Event] = []
        self.clock = 0
        self.npu_calls: list[dict] = []  # filled by npu_emulator.recording_tensors()
        self._seen_calls = 0
        self.estimate = ("estimate, not a measurement: mcu-npu's latency model "
                         "(report.latency) on the host; ")

    def __call__(self, method, chain: int, pc: int, call) -> None:
        kind = type(call).__name__
        if kind == "KernelCall":
            self._kernel(method, chain, pc, call)
        elif kind == "DelegateCall":
            self._delegate(method, chain, pc, call)

    def _kernel(self, method, chain: int, pc: int, call) -> None:
        op = method._plan.operators[call.op_index]
        ns, basis = self.timing.kernel(op.name)
        name = f"native_call_{op.name.split('::')[-1]}" + (f".{op.overload}" if op.overload
                                                           else "")
        value = method.frame.read(call.args[-1]) if self.intermediates and call.args else None
        end = self.clock + ns
        self._add(_Event(name, chain, pc, self.clock, end,
                         value=value.clone() if isinstance(value, torch.Tensor) else None))
        self._add(_Event("OPERATOR_CALL", chain, pc, self.clock, end))
        self.clock = end

    def _delegate(self, method, chain: int, pc: int, call) -> None:
        from ..runtime.npu_emulator import npu_graph

        delegate = method._plan.delegates[call.delegate_index]
        processed = bytes(method._program.backend_delegate_data[delegate.processed.index].data)
        ins, npu, outs, basis = self.timing.delegate()
        start = self.clock
        tensors = {}
        if self.npu_calls and len(self.npu_calls) > self._seen_calls:
            tensors = self.npu_calls[self._seen_calls]
            self._seen_calls = len(self.npu_calls)
        ops = npu_ops(npu_graph(processed, self.named_data)[0].buffer)
        clock = start + ins
        for op, ns in zip(ops, self.timing.split(ops, npu)):
            value = _dequantized(tensors.get(op.outputs[0])) if computes_edge_value(op) else None
            self._add(_Event(None, chain, pc, clock, clock + ns, delegate_id=op.identifier,
                             metadata=self.estimate + basis + "; split over the operators "
                                      "by their bounds",
                             value=value if self.intermediates else None))
            clock += ns
        self.clock = start + ins + npu + outs
        self._add(_Event("DELEGATE_CALL", chain, pc, start, self.clock))

    def _add(self, event: _Event) -> None:
        self.events.append(event)


def _dequantized(value) -> torch.Tensor | None:
    """A TFLite tensor (``litert.TensorValue``) as float in PyTorch's layout."""
    if value is None:
        return None
    data = np.asarray(value.data)
    if value.scale is not None:
        data = (data.astype(np.float32) - value.zero_point) * np.float32(value.scale)
    tensor = torch.from_numpy(np.ascontiguousarray(data))
    if tensor.dim() == 4:
        tensor = tensor.permute(0, 3, 1, 2)
    return tensor.contiguous()


def etdump_bytes(events: list[_Event], total: int, run_outputs=(),
                 bundled_input_index: int | None = None) -> tuple[bytes, bytes]:
    """(ETDump bytes, debug buffer bytes) of one run's ``events`` (in the order the runtime
    ends them), laid out as ExecuTorch's runtime writes them (module docstring); the run's
    block carries ``bundled_input_index`` when given."""
    from executorch.devtools.etdump import schema_flatcc as fc

    def profile(name, chain, instruction, start, end, delegate_id="", metadata=None):
        return fc.Event(fc.ProfileEvent(name, chain, instruction, -1, delegate_id or None,
                                        metadata, start, end), None, None)

    buffer = bytearray()
    load = [profile("Method::init", _UNSET_CHAIN, _UNSET_HANDLE, 0, 0),
            profile("Program::load_method", _UNSET_CHAIN, _UNSET_HANDLE, 0, 0)]
    run = []
    for e in events:
        if e.value is not None:
            run.append(fc.Event(None, None, fc.DebugEvent(
                None, e.chain, e.instruction, -1, e.delegate_id or None,
                _tensor_value(e.value, buffer, False))))
        meta = list(e.metadata.encode()) if e.delegate_id else None
        run.append(profile(e.name, e.chain, e.instruction, e.start, e.end, e.delegate_id,
                           meta))
    run.append(profile("Method::execute", _UNSET_CHAIN, _UNSET_HANDLE, 0, total))
    for value in run_outputs:
        run.append(fc.Event(None, None, fc.DebugEvent(
            None, _UNSET_CHAIN % 2**64, _UNSET_HANDLE, -1, None,  # chain_index is a ulong
            _tensor_value(value, buffer, True))))
    dump = fc.ETDumpFlatCC(0, [fc.RunData(LOAD_NAME, -1, None, load),
                               fc.RunData(RUN_NAME, -1 if bundled_input_index is None
                                          else int(bundled_input_index), None, run)])
    return _size_prefixed_flatbuffer(dump), bytes(buffer)


def _tensor_value(t: torch.Tensor, buffer: bytearray, is_output: bool):
    from executorch.devtools.etdump import schema_flatcc as fc
    from executorch.exir.scalar_type import ScalarType

    t = t.detach().contiguous()
    buffer.extend(b"\0" * (-len(buffer) % _ALIGN))
    offset = len(buffer)
    buffer.extend(t.numpy().tobytes())
    strides = [int(s) for s in t.stride()]
    tensor = fc.Tensor(ScalarType[_SCALAR[t.dtype]], [int(d) for d in t.shape], strides, offset)
    return fc.Value("Tensor", tensor, None, None, None, None, None,
                    fc.Bool(True) if is_output else None)


_SCALAR = {torch.float32: "FLOAT", torch.int8: "CHAR", torch.uint8: "BYTE",
           torch.int16: "SHORT", torch.int32: "INT", torch.int64: "LONG",
           torch.bool: "BOOL", torch.float64: "DOUBLE", torch.float16: "HALF"}


def _size_prefixed_flatbuffer(dump) -> bytes:
    """The ETDump flatbuffer, size-prefixed as the device runtime writes it (ExecuTorch's
    own serializer writes it without the prefix, which its Inspector does not read)."""
    from executorch.devtools.etdump import serialize as etdump_serialize
    from ..upstream.private import run_flatc

    text = etdump_serialize._serialize_from_etdump_to_json(dump)
    with tempfile.TemporaryDirectory(prefix="mcu_npu_etdump_") as d:
        etdump_serialize._write_schema(d, etdump_serialize.ETDUMP_FLATCC_SCHEMA_NAME)
        etdump_serialize._write_schema(d, etdump_serialize.SCALAR_TYPE_SCHEMA_NAME)
        schema = os.path.join(d, etdump_serialize.ETDUMP_FLATCC_SCHEMA_NAME + ".fbs")
        data = os.path.join(d, "etdump.json")
        Path(data).write_text(text)
        run_flatc(["--binary", "--size-prefixed", "-o", d, schema, data])
        return Path(d, "etdump.etdp").read_bytes()  # the schema's file_extension


def record_run(program, inputs, report, etdump: str | os.PathLike,
               debug_buffer: str | os.PathLike | None = None, method: str = "forward",
               bundled_input_index: int | None = None):
    """Run ``program`` (a ``runtime.Program``) on ``inputs`` and write the run's ETDump to
    ``etdump`` and, given ``debug_buffer``, the output tensors to it; returns the outputs.
    ``bundled_input_index``: the representative input of the ETRecord ``inputs`` are."""
    from ..runtime.npu_emulator import recording_tensors

    recorder = Recorder(report, program.named_data, debug_buffer is not None)
    recording = recording_tensors() if debug_buffer is not None else contextlib.nullcontext([])
    with recording as calls:
        recorder.npu_calls = calls
        outputs = program.run(*inputs, method=method, observer=recorder)
    dump, buffer = etdump_bytes(recorder.events, recorder.clock,
                                outputs if debug_buffer is not None else (),
                                bundled_input_index)
    write_all([(etdump, dump)] + ([(debug_buffer, buffer)] if debug_buffer is not None else []))
    return outputs

