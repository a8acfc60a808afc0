"""Delegate calls in a .pte reach their registered emulator, and its outputs flow on."""

import json
from typing import final

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.exir._serialize._named_data_store import NamedDataStore
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.dialects._ops import ops as exir_ops

from mcu_npu.errors import InvalidProgramError
from mcu_npu.runtime.delegates import get_emulator, register_emulator, unregister_emulator
from mcu_npu.runtime.pte import load


@final
class ToyAddBackend(BackendDetails):
    """Compiles a graph of adds into JSON: for each output, the two input indices it sums."""

    @staticmethod
    def preprocess(edge_program, compile_specs):
        index, sums = {}, {}
        for node in edge_program.graph.nodes:
            if node.op == "placeholder":
                index[node] = len(index)
            elif node.op == "call_function":
                sums[node] = [index[a] for a in node.args]
        outputs = [sums[n] for n in next(iter(edge_program.graph.find_nodes(op="output"))).args[0]]
        store = NamedDataStore()
        store.add_named_data("toy/scale", b"\x02")
        return PreprocessResult(processed_bytes=json.dumps(outputs).encode(),
                                data_store_output=store.get_named_data_store_output())


class ToyAddPartitioner(Partitioner):
    def __init__(self, backend_id="ToyAddBackend"):
        super().__init__()
        self.delegation_spec = DelegationSpec(backend_id, [CompileSpec("flavour", b"toy")])

    def partition(self, exported_program):
        for node in exported_program.graph.nodes:
            if node.op == "call_function" and node.target == exir_ops.edge.aten.add.Tensor:
                node.meta["delegation_tag"] = "toy0"
        return PartitionResult(tagged_exported_program=exported_program,
                               partition_tags={"toy0": self.delegation_spec})


CALLS = []


def toy_emulator(processed, compile_specs, named_data, inputs, outputs):
    """Computes the adds (times the named-data scale, to prove the data reached it) into the
    outputs' memory."""
    values = [a.tensor for a in inputs]
    CALLS.append((processed, compile_specs, named_data, [t.clone() for t in values]))
    scale = named_data["toy/scale"][0]
    for out, (i, j) in zip(outputs, json.loads(processed)):
        out.write_memory(((values[i] + values[j]) * scale).numpy())


class TwoAdds(torch.nn.Module):
    def forward(self, x, y):
        a = x * 3.0
        return torch.relu(a + y) - 1.0, (a + x) * 0.5


@pytest.fixture(scope="module")
def toy_pte():
    args = (torch.randn(2, 4), torch.randn(2, 4))
    ep = torch.export.export(TwoAdds(), args)
    return to_edge_transform_and_lower(ep, partitioner=[ToyAddPartitioner()]).to_executorch().buffer


@pytest.fixture
def toy_registered():
    CALLS.clear()
    register_emulator("ToyAddBackend", toy_emulator)
    yield
    unregister_emulator("ToyAddBackend")


def test_delegate_call_is_dispatched_and_outputs_flow_on(toy_pte, toy_registered):
    program = load(toy_pte)
    assert program.backend_ids == ["ToyAddBackend"]
    assert program.named_data == {"toy/scale": b"\x02"}
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    first, second = program.run(x, y)

    (processed, specs, named_data, inputs), = CALLS
    assert specs == [("flavour", b"toy")] and named_data == {"toy/scale": b"\x02"}
    a = x * 3.0
    assert len(inputs) == 3 and sorted(json.loads(processed)) == [[0, 1], [0, 2]]
    assert {_key(t) for t in inputs} == {_key(a), _key(x), _key(y)}
    # The emulator doubles its sums: seeing that downstream proves its outputs were used.
    torch.testing.assert_close(first, torch.relu((a + y) * 2) - 1.0)
    torch.testing.assert_close(second, (a + x) * 2 * 0.5)


def _key(t):
    return tuple(t.flatten().tolist())


def test_unregistered_backend_is_a_clear_error(toy_pte):
    unregister_emulator("ToyAddBackend")
    with pytest.raises(InvalidProgramError, match="backend 'ToyAddBackend', which the host "
                                                  "runtime cannot emulate"):
        load(toy_pte).run(torch.randn(2, 4), torch.randn(2, 4))


def test_emulator_writing_wrong_output_bytes_is_reported(toy_pte):
    def short(p, c, n, inputs, outputs):
        outputs[0].write_memory(inputs[0].memory()[:3])

    register_emulator("ToyAddBackend", short)
    try:
        with pytest.raises(InvalidProgramError, match="wrote 12 bytes into a 32-byte output"):
            load(toy_pte).run(torch.randn(2, 4), torch.randn(2, 4))
    finally:
        unregister_emulator("ToyAddBackend")


def test_registry_refuses_a_second_emulator_for_an_id():
    register_emulator("RegistryProbe", toy_emulator)
    try:
        register_emulator("RegistryProbe", toy_emulator)  # same function: fine
        assert get_emulator("RegistryProbe") is toy_emulator
        with pytest.raises(ValueError, match="RegistryProbe"):
            register_emulator("RegistryProbe", lambda *a: None)
    finally:
        unregister_emulator("RegistryProbe")
    with pytest.raises(InvalidProgramError, match="'RegistryProbe'"):
        get_emulator("RegistryProbe")
