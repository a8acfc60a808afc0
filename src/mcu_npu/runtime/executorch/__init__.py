"""Runs a program in ExecuTorch's own C++ runtime (the installed wheel's), with the device
glue (``glue.cpp``, built on first use by ``build``) registering the NPU backends and the
kernels the runtime lacks; the glue hands the NPU's compute and the kernels' bodies to the
host (``bridge``). Loading, memory planning, argument passing and the delegates' data
movement are then the runtime's and the device backends', not the host runtime's model of
them, so the two runtimes check each other.
"""

from __future__ import annotations

import weakref
from typing import Sequence

import torch

from ...errors import ConfigError, InvalidProgramError
from .. import pte
from . import bridge

RUNTIMES = ("host", "executorch")
"""``run(runtime=...)``: the project's Python runtime (``runtime.pte``), or ExecuTorch's."""

_loaded: "weakref.WeakKeyDictionary[pte.Program, ExecutorchProgram]" = \
    weakref.WeakKeyDictionary()


def check_runtime(runtime: str) -> str:
    """``runtime`` when it names one of ``RUNTIMES``; ConfigError otherwise."""
    if runtime not in RUNTIMES:
        raise ConfigError(f"unknown runtime {runtime!r}: choose one of {', '.join(RUNTIMES)}")
    return runtime


class ExecutorchProgram:
    """A program loaded in ExecuTorch's runtime; ``run`` executes one of its methods. It
    keeps what it needs of the host ``program``, not the program itself (``run`` caches one
    per program, for as long as the program lives)."""

    def __init__(self, program: pte.Program):
        from executorch.runtime import Runtime

        self._named_data = program.named_data
        self._input_specs = {m: program.input_specs_of(m) for m in program.method_names}
        self._dim_orders = {m: program.input_dim_orders_of(m) for m in program.method_names}
        bridge.provide_kernels(program.kernel_names)
        try:
            self._et = Runtime.get().load_program(program.data)
        except Exception as exc:  # the bindings raise RuntimeError / ValueError
            raise InvalidProgramError(f"ExecuTorch's runtime cannot load the program: "
                                      f"{type(exc).__name__}: {exc}") from exc
        self._methods: dict[str, object] = {}
        bridge.opened(self)

    def close(self) -> None:
        """Release the loaded methods (their delegates) and then the program, now rather
        than whenever the garbage collector gets to them; ``run`` then refuses."""
        self._methods.clear()
        self._et = None

    def _method(self, name: str):
        if self._et is None:
            raise ConfigError("this ExecuTorch load was closed (ExecutorchProgram.close)")
        if name not in self._methods:
            bridge.clear_error()
            try:
                with bridge.payload_data(self._named_data):
                    self._methods[name] = self._et.load_method(name)
            except Exception as exc:
                bridge.raise_failure(exc)
                raise InvalidProgramError(
                    f"ExecuTorch's runtime cannot load method '{name}': "
                    f"{bridge.last_error() or f'{type(exc).__name__}: {exc}'}") from exc
        return self._methods[name]

    def run(self, inputs: Sequence, method: str = "forward") -> list[torch.Tensor]:
        """Execute ``method``; the outputs are fresh tensors, not runtime memory."""
        if method not in self._input_specs:
            raise ConfigError(f"the program has no method '{method}' (it has: "
                              f"{', '.join(self._input_specs)})")
        pte.check_inputs(method, self._input_specs[method], inputs)
        loaded = self._method(method)
        inputs = [in_dim_order(x, order) for x, order in zip(inputs, self._dim_orders[method])]
        bridge.clear_error()
        try:
            outputs = loaded.execute(inputs)
        except Exception as exc:
            bridge.raise_failure(exc)
            raise InvalidProgramError(
                f"method '{method}' failed in ExecuTorch's runtime: "
                f"{bridge.last_error() or f'{type(exc).__name__}: {exc}'}") from exc
        return [o.clone() if isinstance(o, torch.Tensor) else torch.tensor(o) for o in outputs]


def reset_state(program: pte.Program) -> None:
    """The program loaded anew in ExecuTorch's runtime on its next run, its mutable buffers
    (a model's state) back at the values the program stores. A method loaded again from the
    same loaded program keeps the buffers' memory as the last run left it."""
    loaded = _loaded.pop(program, None)
    if loaded is not None:
        loaded.close()


def in_dim_order(x, order: tuple[int, ...] | None):
    """``x`` laid out in memory in the dim order the program's input has: the runtime copies
    an input's memory as it is, so any other layout (a channels-last tensor for a
    contiguous input) would be read as if it were that order."""
    if order is None or not isinstance(x, torch.Tensor):
        return x
    inverse = [order.index(d) for d in range(len(order))]
    return x.permute(order).contiguous().permute(inverse)


def run_with(runtime: str, program: pte.Program, inputs: Sequence,
             method: str = "forward") -> list[torch.Tensor]:
    """Execute ``method`` of ``program`` in the runtime named (one of ``RUNTIMES``)."""
    if check_runtime(runtime) == "host":
        return program.run(*inputs, method=method)
    return run(program, inputs, method)


def run(program: pte.Program, inputs: Sequence, method: str = "forward") -> list[torch.Tensor]:
    """Execute ``method`` of ``program`` in ExecuTorch's runtime (loaded once per program)."""
    loaded = _loaded.get(program)
    if loaded is None:
        loaded = _loaded[program] = ExecutorchProgram(program)
    with torch.no_grad():
        return loaded.run(inputs, method)


__all__ = ["RUNTIMES", "ExecutorchProgram", "check_runtime", "reset_state", "run",
           "run_with"]
