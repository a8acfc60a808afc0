"""``mcu-npu check``: a .pte read, never run, against a target's board (issue 17, item 4).

Nothing for a correct program; one line per problem, exit 1, for programs made wrong on
purpose: a payload for another target, a host-only payload, an operator with no kernel.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from zoo.neutron_sdk_double import Behaviour, install
from torch import nn

import mcu_npu
from mcu_npu import cli
from mcu_npu.device.delegate_io import NpuTensor, io_problems
from mcu_npu.firmware.check import check_program
from mcu_npu.npu.ethos_u import FAMILY as ETHOS_U
from mcu_npu.npu.neutron import FAMILY as NEUTRON
from mcu_npu.runtime.pte import load


def small():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU()).eval(), torch.randn(1, 2, 6, 6)


def compile_for(target, **kwargs):
    model, x = small()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return mcu_npu.compile(model, x, target, calibration=[x], **kwargs)


def payload_of(buffer: bytes) -> bytes:
    program = load(buffer)._pte.program
    (delegate,) = program.execution_plan[0].delegates
    return bytes(program.backend_delegate_data[delegate.processed.index].data)


@pytest.fixture(scope="module")
def ethos_u(tmp_path_factory):
    prog = compile_for("corstone-300")
    return prog, prog.save(tmp_path_factory.mktemp("check") / "u55.pte")


@pytest.fixture(scope="module")
def neutron():
    mp = pytest.MonkeyPatch()
    try:
        install(mp, Behaviour())
        return compile_for("imxrt700")
    finally:
        mp.undo()


def test_correct_programs_report_nothing(ethos_u, neutron, capsys):
    assert check_program(ethos_u[1], "corstone-300") == []
    assert check_program(neutron.buffer, "imxrt700") == []
    assert check_program(compile_for("imxrt700", operators_not_to_delegate=["*"]).buffer,
                         "imxrt700") == []
    assert cli.main(["check", str(ethos_u[1]), "--target", "corstone-300"]) == 0
    assert capsys.readouterr().out == f"{ethos_u[1]}: no problem found for corstone-300's board\n"


def test_payload_for_another_target(ethos_u, capsys):
    (line,) = check_program(ethos_u[1], "imxrt700")
    assert line == ("delegate 0 (EthosUBackend): target imxrt700 runs NeutronBackend delegates, "
                    "not EthosUBackend")
    assert cli.main(["check", str(ethos_u[1]), "--target", "imxrt700"]) == 1
    assert capsys.readouterr().out.strip().splitlines() == [f"{ethos_u[1]}: {line}"]


def test_payload_not_in_the_runtimes_format(ethos_u, neutron):
    """Under the right backend id, bytes the device runtime cannot read are refused."""
    vela, nxp_payload = payload_of(ethos_u[0].buffer), payload_of(neutron.buffer)
    one_input = [((1, 2, 6, 6), (0, 1, 2, 3), 1)]
    one_output = [((1, 4, 4, 4), (0, 1, 2, 3), 1)]
    (problem,) = NEUTRON.payload_problems(vela, one_input, one_output, None)
    assert problem.startswith("not a Neutron payload")
    (problem,) = ETHOS_U.payload_problems(nxp_payload, one_input, one_output, None)
    assert problem.startswith("not a Vela bin stream")
    float_input = [((1, 2, 6, 6), (0, 1, 2, 3), 6)]
    assert NEUTRON.payload_problems(nxp_payload, float_input, one_output, None) == []
    assert ETHOS_U.payload_problems(vela, float_input, one_output, None) == []
    # the bin stream is the runtime's; a float tensor for its int8 input record is not
    records = ETHOS_U.npu_tensors(vela, None)
    (problem,) = io_problems(ETHOS_U, [(torch.float32, (1, 2, 6, 6))],
                             [(torch.int8, (1, 4, 4, 4))],
                             *([NpuTensor(*t) for t in records[k]] for k in ("inputs", "outputs")))
    assert problem.startswith("Ethos-U input 0 is torch.float32 for a 1-byte NPU input")


def test_ethos_u_payload_for_another_configuration(ethos_u):
    """Same runtime, other NPU: the U55-128 command stream on the Corstone-320's U85-256."""
    (line,) = check_program(ethos_u[1], "corstone-320")
    assert line == ("delegate 0 (EthosUBackend): compiled for an Ethos-U of architecture 1.x "
                    "with 128 MACs per cycle; target corstone-320 has Arm Ethos-U85-256 "
                    "(architecture 2.x, 256 MACs per cycle)")


def test_host_only_payload():
    (line,) = check_program(compile_for("imxrt700").buffer, "imxrt700")
    assert line.startswith("delegate 0 (NeutronBackend): a host-only payload") and \
        "refuses it" in line


def test_operator_with_no_kernel(ethos_u):
    """An operator name the Cortex-M library lacks (same length: the flatbuffer stays valid)."""
    buffer = ethos_u[0].buffer
    assert buffer.count(b"cortex_m::quantize_per_tensor") == 1
    broken = buffer.replace(b"cortex_m::quantize_per_tensor", b"cortex_m::quantize_per_tensoX")
    (line,) = check_program(broken, "corstone-300")
    assert line == ("cortex_m.quantize_per_tensoX: no kernel for "
                    "cortex_m::quantize_per_tensoX.out on corstone-300: the ExecuTorch "
                    "Cortex-M (CMSIS-NN) kernels have no cortex_m::quantize_per_tensoX.out")


def test_a_planned_view_feeding_a_delegate_is_an_input():
    """ExecuTorch plans a static view as an alias no instruction writes; the check splits a
    delegate call's arguments by the payload's input count, as the device runtime does, so
    such a view is an input, not taken for an output."""
    from zoo import fuzz_nets
    from test_fuzz import FOUND

    from mcu_npu.firmware.check import delegate_calls
    from mcu_npu.npu.ethos_u import payload as ethosu_payload

    model, example, calibration, _ = fuzz_nets.build(
        FOUND["a delegate input that is a planned view, written by no instruction"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        prog = mcu_npu.compile(model, example, "corstone-300", calibration=calibration)
    calls = delegate_calls(load(prog.buffer))
    assert calls
    for _, backend, processed, inputs, outputs in calls:
        stream = ethosu_payload.parse(processed)
        assert (len(inputs), len(outputs)) == (len(stream.inputs), len(stream.outputs))
    assert check_program(prog.buffer, "corstone-300") == []


def test_a_delegate_tensor_in_another_memory_order_is_refused(monkeypatch):
    """The program's dim order of a delegate input must be the one its partition was
    converted for; the Ethos-U runtime copies bytes as they lie. With the strides left
    stale (channels-last after a permute that ``to_edge`` made a copy), the compile refuses
    instead of returning a program whose NPU reads its input transposed."""
    from zoo import fuzz_nets
    from executorch.exir.pass_base import ExportedProgramPassResult
    from test_fuzz import STALE_STRIDES

    from mcu_npu.passes.edge import refresh_strides

    model, example, calibration, _ = fuzz_nets.build(STALE_STRIDES)
    monkeypatch.setattr(refresh_strides.RefreshStrides, "call",
                        lambda self, program: ExportedProgramPassResult(program, False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(mcu_npu.UnsupportedModelError,
                           match=r"input 0: the program hands it in dim order \(0, 1, 2, 3\), "
                                 r"its partition was converted for \(0, 2, 3, 1\)"):
            mcu_npu.compile(model, example, "corstone-300", calibration=calibration)


def _schema(val) -> tuple:
    """A value or instruction, deserialized by ExecuTorch or read by ``firmware.tables``."""
    kind = type(val).__name__
    if kind == "Tensor":
        info = val.allocation_info
        if info is not None and not isinstance(info, tuple):
            info = (info.memory_id, info.memory_offset_low, info.memory_offset_high)
        return (kind, tuple(val.sizes), tuple(val.dim_order), int(val.scalar_type),
                val.data_buffer_idx, info)
    if kind in ("KernelCall", "DelegateCall"):
        return kind, val.op_index if kind == "KernelCall" else val.delegate_index, \
            tuple(val.args)
    if kind == "MoveCall":
        return kind, val.move_from, val.move_to
    return ("Other",)


def test_the_flatbuffer_reader_reads_what_executorch_deserializes(ethos_u, neutron):
    """``check`` reads the ``.pte`` without torch (``firmware.tables``): every value, every
    instruction, every delegate's processed bytes and the named data are what ExecuTorch's
    own deserializer gives, and the delegate calls split as the host runtime splits them."""
    from mcu_npu.firmware.check import delegate_calls, read_program
    from mcu_npu.firmware.tables import program_tables
    from mcu_npu.runtime.delegates import delegate_call_sites

    from executorch.exir._serialize import _program
    from executorch.exir._serialize._named_data_store import NamedDataStore

    host_only = compile_for("imxrt700")
    pte_file = _program.deserialize_pte_binary(ethos_u[0].buffer)  # named data in the .pte
    store = NamedDataStore()
    store.add_named_data("a.key", b"named " * 7)
    store.add_named_data("b", bytes(range(40)))
    pte_file.named_data = store.get_named_data_store_output()
    with_named = bytes(_program.serialize_pte_binary(pte_file, extract_delegate_segments=True))
    assert len(load(with_named).device_named_data) == 2
    for buffer in (ethos_u[0].buffer, neutron.buffer, host_only.buffer, with_named):
        loaded = load(buffer)
        pte = loaded._pte.program
        plans, named = program_tables(buffer)
        assert named == loaded.device_named_data
        assert [p.name for p in plans] == [p.name for p in pte.execution_plan]
        want_calls = []
        for plan, want in zip(plans, pte.execution_plan):
            assert plan.inputs == tuple(want.inputs)
            assert plan.operators == [f"{o.name}.{o.overload}" if o.overload else o.name
                                      for o in want.operators]
            assert [_schema(v.val) for v in plan.values] == \
                [_schema(v.val) for v in want.values]
            assert [[_schema(i.instr_args) for i in c.instructions] for c in plan.chains] == \
                [[_schema(i.instr_args) for i in c.instructions] for c in want.chains]
            assert [(d.id, d.processed) for d in plan.delegates] == \
                [(d.id, bytes(pte.backend_delegate_data[d.processed.index].data))
                 for d in want.delegates]
            for site in delegate_call_sites(pte, want, loaded.named_data):
                want_calls.append((len(want_calls), site.delegate.id, site.processed, *(
                    [tuple(_schema(want.values[i].val)[1:4]) for i in part
                     if type(want.values[i].val).__name__ == "Tensor"]
                    for part in (site.inputs, site.outputs))))
        assert want_calls and delegate_calls(read_program(buffer)) == want_calls
