"""The host side of the device glue (``glue.cpp``): the callbacks its backends and kernels
call, through ctypes.

- ``describe``: at a delegate's init, reads the payload's I/O as the device runtime reads it
  (Vela's records, the Neutron header's flags and maps; a reference payload's graph) and
  hands the glue a flat description; the glue moves the data by it.
- ``npu``: the NPU's compute alone, on the regions the glue prepared (the partition graph
  in LiteRT, ``npu_emulator.npu_compute``).
- ``kernel``: one kernel call, its ExecuTorch values seen as torch tensors over the runtime's
  own memory, run by the host kernel of its operator (``runtime.kernels.resolve``).

The named data a program's payloads look their graphs up in (its companion's host graphs)
is the one given to ``payload_data`` while the program's methods load.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import itertools
import math
import weakref
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from ...errors import InvalidProgramError, McuNpuError
from ...npu import ethos_u, neutron
from .. import npu_emulator
from ..kernels import Frame, dtype_of, resolve
from . import build

ETHOS_U, NEUTRON = 0, 1
"""The glue's two device backends (``glue.cpp``), as its callbacks number them."""
BACKENDS = {ethos_u.FAMILY.backend_id: ETHOS_U, neutron.FAMILY.backend_id: NEUTRON}
"""The NPU families' backend ids the glue registers in ExecuTorch's runtime, by number."""
_MAX_DIMS = 16
_TAG_NONE, _TAG_TENSOR, _TAG_DOUBLE, _TAG_INT, _TAG_BOOL = 0, 1, 3, 4, 5
_TAG_LIST_BOOL, _TAG_LIST_DOUBLE, _TAG_LIST_INT, _TAG_LIST_TENSOR = 6, 7, 8, 9
_TAG_LIST_OPTIONAL_TENSOR = 11


class HostArg(ctypes.Structure):
    """``HostArg`` of glue.cpp: one kernel argument."""

    _fields_ = [("tag", ctypes.c_int32), ("scalar_type", ctypes.c_int32),
                ("dim", ctypes.c_int32), ("reserved", ctypes.c_int32),
                ("int_value", ctypes.c_int64), ("double_value", ctypes.c_double),
                ("data", ctypes.c_void_p), ("nbytes", ctypes.c_int64),
                ("sizes", ctypes.c_int64 * _MAX_DIMS), ("dim_order", ctypes.c_int64 * _MAX_DIMS)]


_DESCRIBE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int64,
                             ctypes.POINTER(ctypes.c_int64), ctypes.c_int64)
_NPU = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int,
                        ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64),
                        ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                        ctypes.POINTER(ctypes.c_int64))
_RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_int)
_KERNEL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(HostArg))


@dataclass(frozen=True)
class NpuCall:
    """What one delegate's NPU computes with: the graph's interpreter and, per NPU input
    and output in the device runtime's order, the graph tensor it is."""

    what: str
    interp: object
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


_handles: dict[int, NpuCall] = {}
_ids = itertools.count()
_named_data: list[dict[str, bytes]] = [{}]
_slots: dict[int, str] = {}  # kernel slot -> registered operator name ("ns::op.overload")


@contextlib.contextmanager
def payload_data(named_data: dict[str, bytes]):
    """Let the delegates initialized in the block find their graphs in ``named_data``."""
    _named_data.append(named_data)
    try:
        yield
    finally:
        _named_data.pop()


def describe(backend_id: str, processed: bytes, named_data: dict[str, bytes]):
    """(the glue's flat I/O description, NpuCall) of one delegate payload."""
    model, meta, interp = npu_emulator.npu_graph(processed, named_data)
    if BACKENDS[backend_id] == ETHOS_U:
        scratch, ins, outs = npu_emulator.ethos_u_layout(processed, model, interp)
        if (len(model.inputs), len(model.outputs)) != (len(ins), len(outs)):
            raise InvalidProgramError("the Ethos-U payload's inputs and outputs differ from its "
                                      "partition graph's")
        flat = [len(ins), len(outs), scratch]
        for r in (*ins, *outs):
            flat += [r.elem_size, r.offset, r.count]
        call = NpuCall("Ethos-U", interp, tuple(s.index for s in model.inputs),
                       tuple(s.index for s in model.outputs))
        return flat, call
    io = npu_emulator.neutron_io(processed, model, meta)
    flat = [len(io.input_formats), len(io.output_formats), io.num_input_args,
            *io.input_formats, *io.output_formats, *io.input_map, *io.output_map]
    if max(io.input_map, default=-1) >= len(model.inputs) or \
            max(io.output_map, default=-1) >= len(model.outputs):
        raise InvalidProgramError("the Neutron payload maps an argument past its graph's")
    call = NpuCall("Neutron", interp, tuple(model.inputs[i].index for i in io.input_map),
                   tuple(model.outputs[i].index for i in io.output_map))
    return flat, call


def _region(pointer: int, nbytes: int) -> np.ndarray:
    """``nbytes`` of runtime memory at ``pointer`` as a writable uint8 array (no copy)."""
    if nbytes == 0:
        return np.zeros(0, dtype=np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(pointer))


def run_npu(call: NpuCall, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    """The NPU computes ``call``'s graph from the input regions into the output regions."""
    if (len(inputs), len(outputs)) != (len(call.inputs), len(call.outputs)):
        raise InvalidProgramError(f"{call.what}: the runtime hands the NPU {len(inputs)} inputs "
                                  f"and {len(outputs)} outputs, its graph has "
                                  f"{len(call.inputs)} and {len(call.outputs)}")
    results = npu_emulator.npu_compute(call.interp, list(zip(call.inputs, inputs)),
                                       list(call.outputs), call.what)
    for k, (result, region) in enumerate(zip(results, outputs)):
        raw = np.ascontiguousarray(result).reshape(-1).view(np.uint8)
        if raw.size != region.size:
            raise InvalidProgramError(f"{call.what} output {k}: the NPU writes {raw.size} bytes "
                                      f"into a {region.size}-byte region")
        region[:] = raw


def tensor_at(arg: HostArg) -> torch.Tensor:
    """The tensor an ExecuTorch value describes, over the runtime's memory (no copy)."""
    dtype, rank = dtype_of(arg.scalar_type), arg.dim
    sizes = [int(arg.sizes[i]) for i in range(rank)]
    order = [int(arg.dim_order[i]) for i in range(rank)]
    if math.prod(sizes) == 0:
        return torch.empty(sizes, dtype=dtype)
    raw = torch.frombuffer((ctypes.c_uint8 * arg.nbytes).from_address(arg.data),
                           dtype=torch.uint8)
    physical = raw.view(dtype).view([sizes[d] for d in order])
    return physical.permute([order.index(d) for d in range(rank)])


def value_of(arg: HostArg):
    """A kernel argument as the host kernels take it."""
    tag = arg.tag
    if tag == _TAG_TENSOR:
        return tensor_at(arg)
    if tag == _TAG_NONE:
        return None
    if tag == _TAG_INT:
        return int(arg.int_value)
    if tag == _TAG_DOUBLE:
        return float(arg.double_value)
    if tag == _TAG_BOOL:
        return bool(arg.int_value)
    if tag in (_TAG_LIST_TENSOR, _TAG_LIST_OPTIONAL_TENSOR):
        return [value_of(item) for item in (HostArg * arg.dim).from_address(arg.data)] \
            if arg.dim else []
    items = {_TAG_LIST_INT: ctypes.c_int64, _TAG_LIST_BOOL: ctypes.c_bool,
             _TAG_LIST_DOUBLE: ctypes.c_double}.get(tag)
    if items is None:
        raise InvalidProgramError(f"a kernel argument has ExecuTorch tag {tag}, which the host "
                                  "kernels do not take")
    if arg.dim == 0:
        return []
    return list((items * arg.dim).from_address(arg.data))


@lru_cache(maxsize=None)
def _kernel(name: str):
    op, _, overload = name.partition(".")
    return resolve(op, overload)


def run_kernel(name: str, args: list[HostArg]) -> None:
    """One kernel call of operator ``name`` on the runtime's values."""
    values = [value_of(a) for a in args]
    orders = {i: tuple(int(a.dim_order[d]) for d in range(a.dim))
              for i, a in enumerate(args) if a.tag == _TAG_TENSOR}
    _kernel(name)(Frame(values, set(), orders), list(range(len(values))))


# --- the ctypes side ------------------------------------------------------------------------

_failures: list[McuNpuError] = []


def _guarded(fn, failed):
    """``fn`` for a C caller: an exception becomes the glue's last error and ``failed``; the
    project's own errors are kept to be raised again once the runtime returns."""
    def call(*args):
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001  (any failure must reach the runtime as a code)
            if isinstance(exc, McuNpuError):
                _failures.append(exc)
            _set_error(f"{type(exc).__name__}: {exc}" if not isinstance(exc, InvalidProgramError)
                       else str(exc))
            return failed
    return call


def _describe_cb(kind: int, data: int, size: int, desc, capacity: int) -> int:
    backend_id = next(name for name, number in BACKENDS.items() if number == kind)
    processed = ctypes.string_at(data, size)
    flat, call = describe(backend_id, processed, _named_data[-1])
    if len(flat) > capacity:
        raise InvalidProgramError(f"the {backend_id} payload has more inputs and outputs than "
                                  "the host glue takes")
    for i, v in enumerate(flat):
        desc[i] = int(v)
    handle = next(_ids)
    _handles[handle] = call
    return handle


def _npu_cb(handle: int, n_in: int, in_ptrs, in_bytes, n_out: int, out_ptrs, out_bytes) -> int:
    run_npu(_handles[handle], [_region(in_ptrs[i], in_bytes[i]) for i in range(n_in)],
            [_region(out_ptrs[i], out_bytes[i]) for i in range(n_out)])
    return 0


def _release_cb(handle: int) -> None:
    _handles.pop(handle, None)


def _kernel_cb(slot: int, n_args: int, args) -> int:
    run_kernel(_slots[slot], [args[i] for i in range(n_args)])
    return 0


_CALLBACKS = (_DESCRIBE(_guarded(_describe_cb, -1)), _NPU(_guarded(_npu_cb, -1)),
              _RELEASE(_guarded(_release_cb, None)), _KERNEL(_guarded(_kernel_cb, -1)))
_lib: ctypes.CDLL | None = None
_open: "weakref.WeakSet" = weakref.WeakSet()  # loads to close at exit (``opened``)


def opened(load) -> None:
    """Close ``load`` (an object with ``close()`` releasing its ExecuTorch program and
    methods) at interpreter exit, before finalisation, if it is still alive then."""
    _open.add(load)


def _at_exit() -> None:
    """Close the open loads while Python is whole (their delegates' ``destroy`` calls the
    release callback), then detach the callbacks from the glue. A native object destroyed
    later, while the interpreter finalises (its garbage cleared in any order, this module's
    globals among it), must not call into Python: that crashed the process at exit."""
    for load in list(_open):
        load.close()
    if _lib is not None:
        _lib.mcu_npu_set_callbacks(_DESCRIBE(), _NPU(), _RELEASE(), _KERNEL())  # null pointers


def glue() -> ctypes.CDLL:
    """The glue library, built if needed and loaded into the process beside ExecuTorch's
    runtime, with its callbacks set and its backends registered."""
    global _lib
    if _lib is not None:
        return _lib
    import executorch.runtime  # noqa: F401  (loads libexecutorch.so, which the glue joins)

    lib = ctypes.CDLL(str(build.library()), mode=ctypes.RTLD_GLOBAL)
    lib.mcu_npu_set_callbacks.argtypes = [_DESCRIBE, _NPU, _RELEASE, _KERNEL]
    lib.mcu_npu_has_kernel.argtypes = [ctypes.c_char_p]
    lib.mcu_npu_register_kernel.argtypes = [ctypes.c_char_p]
    lib.mcu_npu_last_error.restype = ctypes.c_char_p
    lib.mcu_npu_set_error.argtypes = [ctypes.c_char_p]
    lib.mcu_npu_set_callbacks(*_CALLBACKS)
    status = lib.mcu_npu_register_backends()
    if status != 0:
        raise InvalidProgramError(f"ExecuTorch's runtime refused the NPU backends (error "
                                  f"{status:#x}): another library registered "
                                  f"{' or '.join(BACKENDS)} in this process")
    _lib = lib
    atexit.register(_at_exit)
    return lib


def _set_error(message: str) -> None:
    if _lib is not None:
        _lib.mcu_npu_set_error(message.encode(errors="replace")[:2000])


def last_error() -> str:
    """Why the glue last refused or failed ("" when it did not)."""
    return _lib.mcu_npu_last_error().decode(errors="replace") if _lib is not None else ""


def clear_error() -> None:
    _failures.clear()
    _set_error("")


def raise_failure(cause: BaseException) -> None:
    """Raise again the project's error a callback failed with (``cause``: what the runtime
    raised on returning), if one did."""
    if _failures:
        failure = _failures[-1]
        _failures.clear()
        raise failure from cause


def provide_kernels(names) -> None:
    """Register a host kernel under each operator name (``ns::op.overload``) the runtime
    has none for: its own kernels (portable, prim ops) stay in place."""
    lib = glue()
    for name in names:
        if name in _slots.values() or lib.mcu_npu_has_kernel(name.encode()):
            continue
        _kernel(name)  # the host must have it, or the program cannot run here
        slot = lib.mcu_npu_register_kernel(name.encode())
        if slot < 0:
            raise InvalidProgramError(f"cannot register kernel {name} in ExecuTorch's runtime: "
                                      f"{last_error()}")
        _slots[slot] = name


def provided_kernels() -> set[str]:
    """The operator names the glue has registered host kernels under."""
    return set(_slots.values())
