"""ExecuTorch's Inspector on our ETRecord and our host ETDump: one row per op, delegates
expanded into their NPU operators, each with a time; calculate_numeric_gap runs."""

from __future__ import annotations

import math
import warnings

import pytest

from executorch.devtools import Inspector
from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc
from executorch.devtools.etrecord import parse_etrecord

from conftest import ONE_COMPILE_PER_TARGET

pytestmark = [pytest.mark.slow, ONE_COMPILE_PER_TARGET]

QDQ = ("quantize_per_tensor", "dequantize_per_tensor", "dequantize_per_channel")


def inspector(c) -> Inspector:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Inspector(etdump_path=str(c.etdump), etrecord=str(c.etrecord),
                         debug_buffer_path=str(c.debug_buffer))


def compute_nodes(record) -> list:
    """The Edge program's compute nodes (its calls other than quantize / dequantize)."""
    return [n for n in record.edge_dialect_program.graph.nodes
            if n.op == "call_function" and not any(q in str(n.target) for q in QDQ)
            and "getitem" not in str(n.target)]


def op_events(ins: Inspector) -> list:
    (block,) = [b for b in ins.event_blocks if b.name == "Execute"]  # the run, as on a board
    return [e for e in block.events
            if e.name not in ("Method::execute", "DELEGATE_CALL", "OPERATOR_CALL")]


def test_inspector_lists_every_compute_op_with_a_time(ds_cnn_debug):
    record = parse_etrecord(str(ds_cnn_debug.etrecord))
    events = op_events(inspector(ds_cnn_debug))
    timed = {}
    for e in events:
        handles = [e.debug_handles] if isinstance(e.debug_handles, int) else e.debug_handles
        for h in handles or ():
            timed.setdefault(h, []).append(e)
    nodes = compute_nodes(record)
    assert len(nodes) == 21  # DS-CNN: 9 convolutions, 9 relus, pool, view, linear
    for node in nodes:
        rows = timed.get(node.meta["debug_handle"], [])
        assert rows, f"{node.name} has no row in the Inspector"
        assert any(e.perf_data is not None and e.perf_data.raw[0] > 0 for e in rows), node.name
        assert all(e.is_delegated_op and e.delegate_backend_name in ("EthosUBackend",
                                                                     "NeutronBackend")
                   for e in rows), f"{node.name} runs on the NPU"


def test_inspector_rows_are_the_instructions_and_the_npu_operators(ds_cnn_debug):
    prog = ds_cnn_debug.prog
    df = inspector(ds_cnn_debug).to_dataframe()
    assert list(df[df["event_block_name"] == "Default"]["event_name"]) == [
        "Method::init", "Program::load_method"]  # the method load, as the runtime logs it
    df = df[df["event_block_name"] == "Execute"]
    (plan,) = prog._runtime()._pte.program.execution_plan
    instructions = sum(len(chain.instructions) for chain in plan.chains)
    npu_ops = sum(len(p.tflite_ops) for p in prog.report.partitions)
    kernels = (df["event_name"] == "OPERATOR_CALL").sum()  # around each native_call_
    assert kernels == df["event_name"].str.startswith("native_call_").sum() > 0
    assert kernels + (df["event_name"] == "DELEGATE_CALL").sum() == instructions
    assert len(df) == 1 + instructions + kernels + npu_ops
    delegated = df[df["is_delegated_op"]]
    assert len(delegated) == npu_ops
    assert list(delegated["event_name"]) == [f"#{k}:{op}" for p in prog.report.partitions
                                             for k, op in enumerate(p.tflite_ops)]


def test_times_are_the_latency_model_and_say_so(ds_cnn_debug):
    dump = deserialize_from_etdump_flatcc(ds_cnn_debug.etdump.read_bytes())
    assert [r.name for r in dump.run_data] == ["Default", "Execute"]
    run = dump.run_data[1]
    profile = [e.profile_event for e in run.events if e.profile_event is not None]
    assert profile[-1].name == "Method::execute"  # logged when it ends, as by the runtime
    total = profile[-1]
    latency_us = ds_cnn_debug.prog.report.latency["latency_us"]
    assert abs(total.end_time - latency_us * 1000) <= len(profile)  # ns, rounded per row
    delegated = [p for p in profile if p.delegate_debug_id_str]
    assert delegated and all(p.name is None for p in delegated)  # a delegate's events
    for p in delegated:  # the runtime writes metadata on a delegate's events only
        assert b"estimate, not a measurement" in bytes(p.delegate_debug_metadata)


def test_calculate_numeric_gap_compares_every_npu_operator(ds_cnn_debug):
    record = parse_etrecord(str(ds_cnn_debug.etrecord))
    ((_, delegate),) = record._delegate_map["forward"].items()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gap = inspector(ds_cnn_debug).calculate_numeric_gap("MSE")
    runtime_ops = [op for ops in gap["runtime_ops"] for op in ops]
    assert set(delegate["delegate_map"]) <= set(runtime_ops)
    assert all(math.isfinite(g[0]) for g in gap["gap"])


def test_debug_handle_map_covers_every_compute_node_of_each_delegate(ds_cnn_debug):
    record = parse_etrecord(str(ds_cnn_debug.etrecord))
    by_name = {n.name: n for n in record.edge_dialect_program.graph.nodes}
    delegates = list(record._delegate_map["forward"].values())
    partitions = ds_cnn_debug.prog.report.partitions
    assert len(delegates) == len(partitions) == 1
    for delegate, partition in zip(delegates, partitions):
        mapped = {h for handles in delegate["delegate_map"].values() for h in handles}
        covered = [name for name in partition.ops
                   if by_name[name].meta["debug_handle"] in mapped]
        assert len(covered) == len(partition.ops) == 21
