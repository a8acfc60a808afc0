"""The interface program ``keep_interfaces_only`` gives each delegate, built directly, is the
program ``torch.export.export`` traces of the same ``_Outputs`` module: the same nodes, the
same metadata, the same fake values, signature and calling convention. (Compiled programs
with several delegates and several outputs per delegate go through ``to_executorch`` in
tests/partition/test_split_outputs.py and tests/test_cpu_fallback.py.)"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from mcu_npu.backend.delegate import _Outputs, interface_program

CL = torch.channels_last
INTERFACES = {
    "one output, not a tuple": (
        [torch.zeros(1, 3, 8, 8, dtype=torch.int8)],
        [((1, 8, 8, 8), (512, 1, 64, 8), torch.int8)], False),
    "three outputs": (
        [torch.zeros(1, 3, 8, 8, dtype=torch.int8).to(memory_format=CL),
         torch.zeros(2, 5, dtype=torch.int16), torch.zeros(7)],
        [((1, 10), (10, 1), torch.int8), ((1, 4, 2, 2), (16, 1, 8, 4), torch.float32),
         ((3,), (1,), torch.int16)], True),
    "one output in a tuple, no inputs": ([], [((1, 10), (10, 1), torch.int8)], True),
}


def _nodes(program):
    """Per node: op, name, target, args and kwargs (a node by its name), its metadata without the fake value, and
    the fake value's type, shape, strides and dtype."""
    rows = []
    for n in program.graph.nodes:
        meta = dict(n.meta)
        val = meta.pop("val", None)
        fake = None if val is None else (type(val), tuple(val.shape), val.stride(), val.dtype)
        args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: a.name)
        rows.append((n.op, n.name, n.target, args, kwargs, meta, fake))
    return rows


@pytest.mark.parametrize("case", INTERFACES)
def test_interface_program_is_the_traced_program(case):
    inputs, outputs, as_tuple = INTERFACES[case]
    traced = torch.export.export(_Outputs(outputs, as_tuple), tuple(inputs))
    built = interface_program(tuple(inputs), outputs, as_tuple)

    assert _nodes(built) == _nodes(traced)
    assert built.graph_module.code == traced.graph_module.code
    assert built.graph_signature == traced.graph_signature
    assert built.module_call_graph == traced.module_call_graph
    assert built.range_constraints == traced.range_constraints == {}
    assert built.verifiers == traced.verifiers
    assert built.state_dict == traced.state_dict == {}
    assert built.graph_module.meta == traced.graph_module.meta
    vals = [n.meta["val"] for n in built.graph.nodes if "val" in n.meta]
    assert all(isinstance(v, FakeTensor) for v in vals)
    assert len({id(v.fake_mode) for v in vals}) == 1

    got, want = built.module()(*inputs), traced.module()(*inputs)
    assert type(got) is type(want)
    got, want = (got, want) if as_tuple else ((got,), (want,))
    assert [(o.shape, o.stride(), o.dtype) for o in got] \
        == [(o.shape, o.stride(), o.dtype) for o in want] \
        == [(torch.Size(s), st, d) for s, st, d in outputs]
    assert all(not o.any() for o in got)


def test_a_symbolic_size_or_no_output_is_left_to_the_trace():
    x = (torch.zeros(2, 3),)
    shape_env = torch.fx.experimental.symbolic_shapes.ShapeEnv()
    size = shape_env.create_unbacked_symint()
    assert interface_program(x, [((size, 3), (3, 1), torch.float32)], True) is None
    assert interface_program(x, [], True) is None
