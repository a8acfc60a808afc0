"""Bundled programs (``.bpte``): the device program with test inputs and the outputs the host
run computed for them, so firmware built with ExecuTorch's bundled-program support checks
itself (``load_bundled_input`` then ``verify_method_outputs(method, bundle, i, rtol,
atol)``).

The file is ExecuTorch's own (``executorch.devtools.bundled_program``); the program inside is
the device ``.pte`` byte for byte. The bundle does not carry a tolerance: ``tolerance`` says
what the board may differ by, and ``save_c_header(..., bundled=...)`` writes it as
``#define``s beside the array.

- An output a dequantize makes from int8 (float I/O), or an int8 output (``io="int8"``),
  may differ by one quantization step of that output: the numerics contract's bound for an
  NPU's rounding against the reference kernels the host runs (``docs/debugging.md``). The
  firmware's ``atol`` is the largest step over the outputs, ``rtol`` 0.
- A float output no dequantize makes is float arithmetic on the board: ``rtol`` 1e-5, the
  float contract's bound.

``check_bundled`` runs the bundled inputs on the host and wants the expected outputs
exactly: the host computed them, and it computes the same numbers every time.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import InputError, InvalidProgramError
from ..firmware.files import write_atomic

FLOAT_RTOL = 1e-5


@dataclass(frozen=True)
class Tolerance:
    """What a board's outputs may differ from the bundled expected outputs by (the
    arguments of ``verify_method_outputs``), and why."""

    atol: float
    rtol: float
    basis: str


@dataclass(frozen=True)
class Bundle:
    """A written bundled program: its bytes, its test-case count and the board's tolerance."""

    data: bytes
    cases: int
    tolerance: Tolerance

    def defines(self, prefix: str) -> list[str]:
        """The C ``#define``s of a header carrying it (``firmware.c_header``)."""
        t = self.tolerance
        return [f"/* bundled program: verify_method_outputs(method, {prefix.lower()}, i, "
                f"{prefix}_BUNDLED_RTOL, {prefix}_BUNDLED_ATOL) for each test case i; "
                f"tolerance: {t.basis} */",
                f"#define {prefix}_BUNDLED 1",
                f"#define {prefix}_BUNDLED_TEST_CASES {self.cases}",
                f"#define {prefix}_BUNDLED_ATOL {float(t.atol)!r}",
                f"#define {prefix}_BUNDLED_RTOL {float(t.rtol)!r}"]


@dataclass(frozen=True)
class CaseResult:
    """One bundled test case run on the host: the largest absolute difference per output."""

    index: int
    max_abs_diff: tuple[float, ...]

    @property
    def ok(self) -> bool:
        return all(d == 0 for d in self.max_abs_diff)


@dataclass(frozen=True)
class BundledCheck:
    """The host's check of a ``.bpte``: every case's outputs against the expected ones."""

    cases: tuple[CaseResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.cases)

    def __str__(self) -> str:
        lines = []
        for c in self.cases:
            diffs = ", ".join(f"{d:g}" for d in c.max_abs_diff)
            lines.append(f"case {c.index}: {'ok' if c.ok else 'MISMATCH'} "
                         f"(max |host - expected| per output: {diffs})")
        return "\n".join(lines)


def as_cases(inputs, n_inputs: int) -> list[tuple]:
    """Test cases from ``inputs``: a list of input tuples, or of tensors for a one-input
    program."""
    if isinstance(inputs, torch.Tensor) or not isinstance(inputs, (list, tuple)) or not inputs:
        raise InputError("bundled inputs must be a non-empty list of test cases, each a tuple "
                         "of the program's inputs (or a tensor for a one-input program)")
    cases = []
    for k, case in enumerate(inputs):
        case = (case,) if isinstance(case, torch.Tensor) else tuple(case)
        if len(case) != n_inputs:
            raise InputError(f"bundled test case {k} has {len(case)} inputs; the program "
                             f"takes {n_inputs}")
        cases.append(case)
    return cases


def bundled_bytes(buffer: bytes, cases: list[tuple], outputs: list[list[torch.Tensor]],
                  method: str = "forward") -> bytes:
    """A ``.bpte`` holding program ``buffer`` and one test case per input tuple with its
    expected outputs."""
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.core import BundledProgram
    from executorch.devtools.bundled_program.serialize import \
        serialize_from_bundled_program_to_flatbuffer

    suite = MethodTestSuite(method_name=method, test_cases=[
        MethodTestCase(inputs=[x.contiguous() for x in case],
                       expected_outputs=[y.contiguous() for y in expected])
        for case, expected in zip(cases, outputs)])
    with tempfile.TemporaryDirectory(prefix="mcu_npu_bpte_") as d:
        pte = Path(d, "program.pte")
        pte.write_bytes(buffer)
        bundle = BundledProgram(None, [suite], pte_file_path=str(pte))
        return serialize_from_bundled_program_to_flatbuffer(bundle)


def bundle(program, buffer: bytes, inputs, method: str = "forward") -> Bundle:
    """Run ``inputs`` on ``program`` (a ``runtime.Program`` of ``buffer``): the bundled
    program with the host's outputs as the expected ones."""
    cases = as_cases(inputs, len(program.input_specs_of(method)))
    outputs = [program.run(*case, method=method) for case in cases]
    return Bundle(bundled_bytes(buffer, cases, outputs, method), len(cases),
                  tolerance(program, method))


def write_bundled(path: str | os.PathLike, program, buffer: bytes, inputs,
                  method: str = "forward") -> Bundle:
    """``bundle(...)`` written to ``path`` (whole or not at all)."""
    made = bundle(program, buffer, inputs, method)
    write_atomic(path, made.data)
    return made


def read_bundled(data: bytes):
    """(program bytes, [(inputs, expected outputs)] of ``forward``) of a ``.bpte``."""
    from executorch.devtools.bundled_program.serialize import \
        deserialize_from_flatbuffer_to_bundled_program

    from ..upstream.private import bundled_program_file_identifier

    if len(data) < 8 or data[4:8] != bundled_program_file_identifier():
        raise InvalidProgramError(
            f"not a bundled program: file identifier {bytes(data[4:8])!r}, expected "
            f"{bundled_program_file_identifier()!r} "
            "(write one with save_bundled or mcu-npu compile --bundled)")
    try:
        bundle = deserialize_from_flatbuffer_to_bundled_program(bytes(data))
    except Exception as exc:  # flatc and the dataclass decoder raise any type
        raise InvalidProgramError(f"cannot parse the bundled program: {type(exc).__name__}: "
                                  f"{exc}") from exc
    _check_whole(data, bundle)
    suites = {s.method_name: s for s in bundle.method_test_suites}
    if "forward" not in suites:
        raise InvalidProgramError("the bundled program has no test cases for 'forward'")
    cases = [([_tensor(v.val) for v in c.inputs], [_tensor(v.val) for v in c.expected_outputs])
             for c in suites["forward"].test_cases]
    return bytes(bundle.program), cases


def _check_whole(data: bytes, bundle) -> None:
    """Refuse a truncated ``.bpte``: a flatbuffer does not state its size, and a parser reads
    a file cut inside its last string or padding as if it were whole; what it read, written
    again, must not need more bytes than the file has."""
    from ..upstream.private import bundled_program_to_flatbuffer

    try:
        needed = len(bundled_program_to_flatbuffer(bundle))
    except Exception as exc:  # what was read does not serialize: it was not whole either
        raise InvalidProgramError(f"cannot parse the bundled program: {type(exc).__name__}: "
                                  f"{exc}") from exc
    if len(data) < needed:
        raise InvalidProgramError(f"the bundled program is truncated: its contents take "
                                  f"{needed} bytes, the file has {len(data)}")


def _tensor(t) -> torch.Tensor:
    from ..runtime.kernels import dtype_of

    if type(t).__name__ != "Tensor":
        raise InvalidProgramError(f"a bundled value is a {type(t).__name__}; the host check "
                                  "reads tensors only")
    dtype = dtype_of(t.scalar_type)
    sizes = [int(s) for s in t.sizes]
    order = [int(d) for d in t.dim_order] or list(range(len(sizes)))
    raw = torch.frombuffer(bytearray(t.data), dtype=torch.uint8) if len(t.data) else \
        torch.zeros(0, dtype=torch.uint8)
    physical = raw.view(dtype).reshape([sizes[d] for d in order])
    return physical.permute([order.index(d) for d in range(len(order))]).contiguous()


def check_file(path_or_bytes, companion=None) -> BundledCheck:
    """``check_cases`` on a ``.bpte`` (a path or its bytes), its program run on the host with
    its companion (``companion``, or the ``.ptd`` beside a path)."""
    from ..errors import HostDataMissingError
    from ..firmware.companion import resolve
    from ..runtime import load_program
    from ..runtime.pte import read_bytes

    data = read_bytes(path_or_bytes, "bundled program")
    program, cases = read_bundled(data)
    found, name = resolve(path_or_bytes, program, companion)
    runtime = load_program(program, found.host_data if found is not None else None)
    try:
        return check_cases(runtime.run, cases)
    except HostDataMissingError:
        raise HostDataMissingError(
            f"running this bundled program on the host needs its program's companion file "
            f"{name or '(none given)'} (the .ptd written beside the .pte), not found") from None


def check_cases(run, cases) -> BundledCheck:
    """Run every case's inputs with ``run`` and compare with its expected outputs exactly."""
    results = []
    for k, (inputs, expected) in enumerate(cases):
        got = run(*inputs)
        if len(got) != len(expected):
            raise InvalidProgramError(f"bundled case {k} expects {len(expected)} outputs; the "
                                      f"program makes {len(got)}")
        diffs = []
        for g, e in zip(got, expected):
            if tuple(g.shape) != tuple(e.shape) or g.dtype != e.dtype:
                diffs.append(float("inf"))
            else:
                diffs.append(float((g.double() - e.double()).abs().max()) if g.numel() else 0.0)
        results.append(CaseResult(k, tuple(diffs)))
    return BundledCheck(tuple(results))


def tolerance(program, method: str = "forward") -> Tolerance:
    """What a board's outputs of ``program`` may differ by (module docstring)."""
    plan = program._plan(method)
    steps, floats = [], 0
    for index in plan.outputs:
        step = _output_step(plan, index)
        if step is None:
            floats += 1
        else:
            steps.append(step)
    atol = max(steps, default=0.0)
    if floats:
        return Tolerance(atol, FLOAT_RTOL,
                         f"{floats} output(s) computed in float on the board: relative "
                         f"{FLOAT_RTOL:g} (the float contract)"
                         + (f"; quantized outputs one step, up to {atol:g}" if steps else ""))
    return Tolerance(atol, 0.0, "one quantization step of each output (the bound for the "
                                "NPU's rounding against the host's reference kernels); "
                                f"largest step {atol:g}")


def tolerance_note(program, method: str = "forward") -> str:
    """The report's statement of ``tolerance``: what a board's outputs may differ by."""
    t = tolerance(program, method)
    return (f"a board's outputs may differ from the host run's by atol {t.atol:g}, rtol "
            f"{t.rtol:g}: {t.basis} (the tolerance of a bundled program's checks, "
            f"save_bundled)")


def _output_step(plan, index: int) -> float | None:
    """The quantization step of output value ``index``: 1 for an integer tensor, the scale
    of the dequantize that writes it, None for a float output no dequantize makes."""
    from ..runtime.kernels import dtype_of

    val = plan.values[index].val
    if type(val).__name__ == "Tensor" and not dtype_of(val.scalar_type).is_floating_point:
        return 1.0
    for chain in plan.chains:
        for instruction in chain.instructions:
            call = instruction.instr_args
            if type(call).__name__ != "KernelCall" or not call.args or call.args[-1] != index:
                continue
            op = plan.operators[call.op_index].name
            scale = plan.values[call.args[1]].val if len(call.args) > 1 else None
            if "dequantize_per_tensor" in op and type(scale).__name__ == "Double":
                return float(torch.tensor(scale.double_val, dtype=torch.float32))
    return None
