"""Random input samples and the checks of a compiled program's runs, shared by the model
sets and the tests."""

from __future__ import annotations

import torch


def calibration_set(example_inputs, n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(x.shape, generator=g) * 1.0 for x in example_inputs)
            for _ in range(n)]


def as_list(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def assert_loads_in_executorch(buffer: bytes, inputs, outputs, method: str = "forward") -> None:
    """Load ``buffer`` with ExecuTorch's own C++ runtime (``executorch.runtime.Runtime``) and
    check ``method``'s metadata against the model: as many inputs as ``inputs`` and outputs as
    ``outputs`` (a tensor or a sequence of tensors, e.g. a host run's result), each with the
    same dtype and sizes. Metadata only: running the program in that runtime is
    ``run(runtime="executorch")``, which model-level tests do for every host run
    (``tests/conftest.py``)."""
    from executorch.exir.tensor import scalar_type_enum
    from executorch.runtime import Runtime

    try:
        program = Runtime.get().load_program(bytes(buffer))
    except Exception as exc:  # the bindings raise RuntimeError / ValueError on a bad program
        raise AssertionError(f"ExecuTorch's runtime cannot load the .pte ({len(buffer)} bytes): "
                             f"{type(exc).__name__}: {exc}") from exc
    assert method in program.method_names, \
        f"ExecuTorch: no method {method!r} in the .pte (it has {sorted(program.method_names)})"
    meta = program.metadata(method)
    for kind, expected, count, info in (
            ("input", as_list(inputs), meta.num_inputs(), meta.input_tensor_meta),
            ("output", as_list(outputs), meta.num_outputs(), meta.output_tensor_meta)):
        assert count == len(expected), \
            f"ExecuTorch: {method} has {count} {kind}(s), expected {len(expected)}: {meta}"
        for i, want in enumerate(expected):
            assert isinstance(want, torch.Tensor), f"expected {kind} {i} is a {type(want)}"
            got, where = info(i), f"ExecuTorch: {method} {kind} {i}"
            assert tuple(got.sizes()) == tuple(want.shape), \
                f"{where} has sizes {list(got.sizes())}, expected {list(want.shape)}"
            assert got.dtype() == scalar_type_enum(want.dtype), \
                f"{where} is {got}, expected dtype {want.dtype} " \
                f"(ScalarType {int(scalar_type_enum(want.dtype))}, got {got.dtype()})"
            assert got.nbytes() == want.numel() * want.element_size(), \
                f"{where} holds {got.nbytes()} bytes, expected {want.numel() * want.element_size()}"


def assert_same_outputs(a, b, a_name: str = "a", b_name: str = "b") -> None:
    """Two runs' outputs are the same tensors, bit for bit (dtype, shape and values)."""
    assert len(a) == len(b), f"{a_name} gives {len(a)} outputs, {b_name} {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype and x.shape == y.shape, \
            f"output {i}: {a_name} gives {x.dtype} {tuple(x.shape)}, {b_name} {y.dtype} " \
            f"{tuple(y.shape)}"
        if not torch.equal(x, y):
            diff = (x.double() - y.double()).abs()
            raise AssertionError(
                f"output {i} differs between {a_name} and {b_name} at "
                f"{int((diff > 0).sum())} of {x.numel()} elements (largest difference "
                f"{float(diff.max()):g}, first at flat index {int((diff > 0).flatten().nonzero()[0])})")
