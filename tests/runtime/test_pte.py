"""The .pte host runtime runs serialized programs exactly as the eager models compute."""

import pytest
import torch
from executorch.exir import to_edge

from mcu_npu.errors import ConfigError, InputError, InvalidProgramError
from mcu_npu.runtime.kernels import Frame, resolve
from mcu_npu.runtime.pte import InputSpec, Program, load


def pte_of(model, *args) -> bytes:
    return to_edge(torch.export.export(model.eval(), args)).to_executorch().buffer


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(36, 5)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(y.flatten(1))


class Elementwise(torch.nn.Module):
    def forward(self, x, y):
        z = (x * 2.5 + y) / (1.0 + y.abs()) - 0.5
        return torch.where(z > 0, torch.clamp(z, max=1.0), z * 0.1)


class Reshuffle(torch.nn.Module):
    def forward(self, x):
        a, b = torch.split(x, [2, 3], dim=1)
        c = torch.cat([b, a * 2.0], dim=1).permute(0, 2, 1)
        return c.reshape(2, -1).view(-1, 5)[1:] + 1.0


class MultiOut(torch.nn.Module):
    def forward(self, x):
        values, indices = x.max(dim=-1)
        return values, indices, x.sum(dim=1, keepdim=True) * 3.0


class Branchy(torch.nn.Module):
    def forward(self, x, y):
        return torch.cond(x.sum() > 0, lambda a, b: a * 2.0 + b, lambda a, b: a - b, (x, y))


class Mapped(torch.nn.Module):
    def forward(self, xs, y):
        from torch._higher_order_ops.map import map as map_rows

        return map_rows(lambda x, y: x * 2.0 + y, xs, y)


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.full((1,), 5.0))

    def forward(self, x):
        self.count.add_(1.0)
        return x + self.count


CASES = [
    (ConvNet, lambda: (torch.randn(1, 3, 8, 8),)),
    (Elementwise, lambda: (torch.randn(3, 4), torch.randn(1, 4))),
    (Reshuffle, lambda: (torch.randn(2, 5, 3),)),
    (MultiOut, lambda: (torch.randn(2, 3, 6),)),
]


@pytest.mark.parametrize("cls,make", CASES, ids=[c[0].__name__ for c in CASES])
def test_float_programs_match_eager(cls, make):
    model = cls().eval()
    program = load(pte_of(model, *make()))
    for _ in range(2):  # a second run reuses the planned memory
        args = make()
        expected = model(*args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        outputs = program.run(*args)
        assert len(outputs) == len(expected)
        for got, want in zip(outputs, expected):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_channels_last_input_follows_dim_order():
    model = ConvNet().eval()
    x = torch.randn(1, 3, 8, 8).to(memory_format=torch.channels_last)
    program = load(pte_of(model, x))
    torch.testing.assert_close(program.run(x)[0], model(x), rtol=1e-6, atol=1e-6)


@pytest.mark.filterwarnings("ignore:Mutation on a buffer")
def test_mutable_buffer_starts_from_its_initial_state_and_persists():
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    x = torch.zeros(3)
    config = ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["count"])])
    edge = to_edge(torch.export.export(Counter(), (x,)))
    program = load(edge.to_executorch(config).buffer)
    assert program.run(x)[0].tolist() == [6.0] * 3
    assert program.run(x)[0].tolist() == [7.0] * 3


def test_control_flow_jumps_take_both_branches():
    model = Branchy()
    program = load(pte_of(model, torch.randn(3), torch.randn(3)))
    for sign in (1.0, -1.0, 1.0):
        x, y = torch.full((3,), sign), torch.randn(3)
        torch.testing.assert_close(program.run(x, y)[0], model(x, y), rtol=0, atol=0)


def test_map_loops_over_rows_with_prim_ops():
    model = Mapped()
    program = load(pte_of(model, torch.randn(4, 3), torch.randn(3)))
    for _ in range(2):
        xs, y = torch.randn(4, 3), torch.randn(3)
        torch.testing.assert_close(program.run(xs, y)[0], model(xs, y), rtol=0, atol=0)


def test_inputs_that_require_grad_run_as_inference():
    model = Elementwise()
    program = load(pte_of(model, torch.randn(3, 4), torch.randn(1, 4)))
    x, y = torch.randn(3, 4, requires_grad=True), torch.randn(1, 4)
    out = program.run(x, y)[0]
    assert not out.requires_grad
    torch.testing.assert_close(out, model(x, y).detach(), rtol=1e-6, atol=1e-6)


def test_outputs_do_not_alias_runtime_memory():
    program = load(pte_of(Elementwise(), torch.randn(3, 4), torch.randn(1, 4)))
    first = program.run(torch.ones(3, 4), torch.ones(1, 4))[0]
    kept = first.clone()
    program.run(-torch.ones(3, 4), torch.ones(1, 4))
    assert torch.equal(first, kept)


def test_quantized_program_is_bit_exact_with_reference():
    import executorch.kernels.quantized  # noqa: F401  (out-variants for to_executorch)

    from mcu_npu.flow.edge import edge_compile_config
    from mcu_npu.quantization import quantize

    x = torch.randn(1, 3, 8, 8)
    calibration = [(torch.randn(1, 3, 8, 8),) for _ in range(4)]
    reference = quantize(ConvNet().eval(), (x,), calibration)
    edge = to_edge(torch.export.export(reference, (x,)), compile_config=edge_compile_config())
    program = load(edge.to_executorch().buffer)
    for _ in range(3):
        x = torch.randn(1, 3, 8, 8)
        torch.testing.assert_close(program.run(x)[0], reference(x), rtol=0, atol=1e-6)


def test_load_from_path_equals_load_from_bytes(tmp_path):
    buffer = pte_of(Elementwise(), torch.randn(3, 4), torch.randn(1, 4))
    path = tmp_path / "model.pte"
    path.write_bytes(buffer)
    args = (torch.randn(3, 4), torch.randn(1, 4))
    from_bytes = load(buffer).run(*args)
    assert torch.equal(load(path).run(*args)[0], from_bytes[0])
    assert torch.equal(load(str(path)).run(*args)[0], from_bytes[0])


def test_program_describes_its_methods_and_inputs():
    program = load(pte_of(Elementwise(), torch.randn(3, 4), torch.randn(1, 4)))
    assert isinstance(program, Program)
    assert program.method_names == ["forward"]
    assert program.input_specs == [InputSpec((3, 4), torch.float32),
                                   InputSpec((1, 4), torch.float32)]
    assert program.named_data == {} and program.backend_ids == []
    with pytest.raises(ConfigError, match="no method 'backward'"):
        program.run(torch.randn(3, 4), torch.randn(1, 4), method="backward")


@pytest.fixture(scope="module")
def convnet_pte():
    return pte_of(ConvNet(), torch.randn(1, 3, 8, 8))


def test_missing_file(tmp_path):
    with pytest.raises(InvalidProgramError, match="not found"):
        load(tmp_path / "absent.pte")


@pytest.mark.parametrize("data,message", [
    (b"", "too few"),
    (b"\x00" * 64, "not an ExecuTorch program"),
    (b"garbage that is certainly not a flatbuffer", "not an ExecuTorch program"),
])
def test_garbage_bytes(data, message):
    with pytest.raises(InvalidProgramError, match=message):
        load(data)


@pytest.mark.parametrize("keep", [0.5, 0.9, 40])
def test_truncated_program(convnet_pte, keep):
    size = int(len(convnet_pte) * keep) if isinstance(keep, float) else keep
    with pytest.raises(InvalidProgramError, match="truncated|cannot parse"):
        load(convnet_pte[:size])


def test_corrupt_body_is_reported_not_raised_raw(convnet_pte):
    data = bytearray(convnet_pte)
    data[100:400] = b"\xff" * 300
    with pytest.raises(InvalidProgramError):
        load(bytes(data)).run(torch.randn(1, 3, 8, 8))


@pytest.mark.parametrize("args,message", [
    ((), "takes 1 input but 0 were given"),
    ((torch.randn(1, 3, 8, 8), torch.randn(1)), "takes 1 input but 2 were given"),
    ((torch.randn(1, 3, 9, 9),), r"input 0 has shape \(1, 3, 9, 9\) but the program expects "
                                 r"\(1, 3, 8, 8\)"),
    ((torch.zeros(1, 3, 8, 8, dtype=torch.int8),), "input 0 has dtype torch.int8 but the "
                                                   "program expects torch.float32"),
    ((3.0,), "input 0 is a float but the program expects a tensor"),
])
def test_wrong_inputs(convnet_pte, args, message):
    with pytest.raises(InputError, match=message):
        load(convnet_pte).run(*args)


def _run_kernel(name, overload, *values):
    """Run one kernel on `values`; the last value is the out tensor."""
    frame = Frame(list(values), set())
    resolve(name, overload)(frame, list(range(len(values))) + [len(values) - 1])
    return values[-1]


def test_quantized_decomposed_out_variant():
    x = torch.tensor([0.0, 0.26, -1.0, 100.0])
    out = _run_kernel("quantized_decomposed::quantize_per_tensor", "out",
                      x, 0.1, 3, -128, 127, 1, torch.empty(4, dtype=torch.int8))
    assert out.tolist() == [3, 6, -7, 127]


def test_quantize_into_a_channels_last_tensor_keeps_the_values():
    """Planned memory in channels-last dim order, as a channels_last program input gives it:
    the result's values land in that memory in its order (ExecuTorch's AOT kernel alone would
    re-stride the out tensor and mix the values up)."""
    x = torch.randn(1, 4, 3, 2)
    physical = torch.zeros(1, 3, 2, 4, dtype=torch.int8)
    out = physical.permute(0, 3, 1, 2)  # a (1, 4, 3, 2) view laid out as (0, 2, 3, 1)
    values = [x.to(memory_format=torch.channels_last), 0.1, 0, -128, 127, 1, out]
    frame = Frame(values, set(), {0: (0, 2, 3, 1), 6: (0, 2, 3, 1)})
    resolve("quantized_decomposed::quantize_per_tensor", "out")(frame, list(range(7)) + [6])
    expected = torch.clamp(torch.round(x / 0.1), -128, 127).to(torch.int8)
    assert torch.equal(out, expected) and torch.equal(physical, expected.permute(0, 2, 3, 1))


def test_quantize_between_different_dim_orders_is_refused():
    """The device kernel walks input and output memory in step: with different dim orders
    the board would write a permuted result, so the host refuses the program."""
    x = torch.randn(1, 4, 3, 2).to(memory_format=torch.channels_last)
    frame = Frame([x, 0.1, 0, -128, 127, 1, torch.empty(1, 4, 3, 2, dtype=torch.int8)], set(),
                  {0: (0, 2, 3, 1), 6: (0, 1, 2, 3)})
    with pytest.raises(InvalidProgramError, match="walks memory linearly"):
        resolve("quantized_decomposed::quantize_per_tensor", "out")(frame, list(range(7)) + [6])


def test_dim_order_copy_out_variant():
    x = torch.randn(2, 3)
    out = _run_kernel("dim_order_ops::_to_dim_order_copy", "out",
                      x, False, None, torch.empty(2, 3))
    assert torch.equal(out, x)


def test_cortex_m_out_variant_runs_through_its_functional_reference():
    x = torch.tensor([0.0, 0.26, -1.0, 100.0])
    out = _run_kernel("cortex_m::quantize_per_tensor", "out",
                      x, 0.1, 3, -128, 127, 1, torch.empty(4, dtype=torch.int8))
    assert out.tolist() == [3, 6, -7, 127]
    a, b = torch.tensor([1, -5, 7], dtype=torch.int8), torch.tensor([2, -9, 0], dtype=torch.int8)
    out = _run_kernel("cortex_m::maximum", "out", a, b, torch.empty(3, dtype=torch.int8))
    assert out.tolist() == [2, -5, 7]


def test_unknown_operator_is_named():
    with pytest.raises(InvalidProgramError, match="nosuchns::frobnicate.out"):
        resolve("nosuchns::frobnicate", "out")
    with pytest.raises(InvalidProgramError, match="aten::add.no_such_overload"):
        resolve("aten::add", "no_such_overload")


def test_executorch_metadata_check_fails_on_a_wrong_expectation():
    """assert_loads_in_executorch passes on a compiled program's own inputs and outputs and
    fails on a wrong shape, dtype or output count, and on bytes that are not a program."""
    import mcu_npu
    from helpers import assert_loads_in_executorch

    x = torch.randn(1, 3, 8, 8)
    prog = mcu_npu.compile(ConvNet().eval(), (x,), target="imxrt700", calibration=[(x,)],
                           npu_compiler="reference")
    out = prog.run(x)
    assert_loads_in_executorch(prog.buffer, (x,), out)
    with pytest.raises(AssertionError, match=r"input 0 has sizes \[1, 3, 8, 8\], expected "
                                             r"\[1, 3, 9, 9\]"):
        assert_loads_in_executorch(prog.buffer, (torch.randn(1, 3, 9, 9),), out)
    with pytest.raises(AssertionError, match=r"output 0 has sizes \[1, 5\], expected \[5\]"):
        assert_loads_in_executorch(prog.buffer, (x,), [out[0].flatten()])
    with pytest.raises(AssertionError, match="output 0 is .*expected dtype torch.int8"):
        assert_loads_in_executorch(prog.buffer, (x,), [out[0].to(torch.int8)])
    with pytest.raises(AssertionError, match=r"1 output\(s\), expected 2"):
        assert_loads_in_executorch(prog.buffer, (x,), [out[0], out[0]])
    with pytest.raises(AssertionError, match="cannot load the .pte"):
        assert_loads_in_executorch(prog.buffer[:len(prog.buffer) // 2], (x,), out)
