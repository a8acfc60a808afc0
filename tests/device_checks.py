"""Checks that a .pte's delegate I/O is what the device runtimes hand the NPU: the payload's
own I/O records (Vela's 6-D shapes, Neutron's format flags) read beside the .pte's tensors."""

from __future__ import annotations

from mcu_npu.device.delegate_io import neutron_layout
from mcu_npu.npu.ethos_u import payload as bin_stream
from mcu_npu.npu.neutron import payload as nxp
from mcu_npu.device.payload import find_host_graph, is_container, unpack_reference
from mcu_npu.runtime.delegates import delegate_call_sites
from mcu_npu.runtime.pte import load


def delegate_io(buffer: bytes, host_data: dict[str, bytes] | None = None):
    """Per delegate call: (processed bytes, inputs, outputs, named data), each tensor as
    (sizes, dim order, dtype code), read from the .pte as a device runtime would (inputs are
    the payload's count of leading arguments); the named data with the companion's
    ``host_data`` (the graphs behind vendor payloads)."""
    program = load(buffer, host_data)
    pte = program._pte.program
    plan = pte.execution_plan[0]
    calls = []
    for site in delegate_call_sites(pte, plan, program.named_data):
        described = [[(tuple(plan.values[i].val.sizes), tuple(plan.values[i].val.dim_order),
                       int(plan.values[i].val.scalar_type)) for i in part]
                     for part in (site.inputs, site.outputs)]
        calls.append((site.processed, *described, program.named_data))
    return calls


def memory_shape(sizes, order) -> list[int]:
    """The tensor's sizes in memory order, size-1 dims left out."""
    return [sizes[d] for d in order if sizes[d] != 1]


def merges_of(dims: list[int], target: list[int]) -> bool:
    """True when ``target`` is ``dims`` with runs of adjacent dims merged (so a row-major walk
    of either visits the same elements in the same order)."""
    at = 0
    for want in target:
        size = 1
        while size < want and at < len(dims):
            size *= dims[at]
            at += 1
        if size != want:
            return False
    return at == len(dims)


def assert_ethos_u_io_matches(buffer: bytes) -> None:
    """Each delegate tensor's memory order is Vela's I/O shape (which Vela may write with
    adjacent dims merged, when it folds a reshape into the I/O): the runtime copies bytes."""
    calls = delegate_io(buffer)
    assert calls, "the program has no Ethos-U delegate"
    for processed, inputs, outputs, _ in calls:
        stream = bin_stream.parse(processed)
        assert (len(stream.inputs), len(stream.outputs)) == (len(inputs), len(outputs))
        for (sizes, order, dtype), io in zip(inputs + outputs, stream.inputs + stream.outputs):
            assert dtype == 1 and io.elem_size == 1, "Ethos-U delegate I/O must be int8"
            assert merges_of(memory_shape(sizes, order), [d for d in io.shape if d != 1]), (
                f"the .pte tensor {sizes} with dim order {order} is copied as it lies into a "
                f"Vela tensor of shape {io.shape}")


def neutron_host_graph(processed: bytes, named_data):
    payload = processed if is_container(processed) else find_host_graph(named_data, processed)
    model, meta = unpack_reference(payload)
    if is_container(processed):
        return model, meta["neutron_formats"]["inputs"], meta["neutron_formats"]["outputs"], \
            range(len(model.inputs)), range(len(model.outputs))
    fields = nxp.parse(processed)
    return model, fields.input_formats, fields.output_formats, fields.input_map, \
        fields.output_map


def assert_neutron_io_matches(buffer: bytes, host_data: dict[str, bytes] | None = None) -> None:
    """What the Neutron runtime hands the NPU under each flag is the partition graph's layout
    (``host_data``: the companion's graphs, for vendor payloads)."""
    calls = delegate_io(buffer, host_data)
    assert calls, "the program has no Neutron delegate"
    for processed, inputs, outputs, named in calls:
        model, in_fmt, out_fmt, in_map, out_map = neutron_host_graph(processed, named)
        for args, specs, formats, order_map in ((inputs, model.inputs, in_fmt, in_map),
                                                (outputs, model.outputs, out_fmt, out_map)):
            for flag, k in zip(formats, order_map):
                sizes, order, _ = args[k]
                delivered = neutron_layout(sizes, order, flag)
                graph_layout = specs[k].perm
                assert memory_shape(sizes, delivered) == memory_shape(sizes, graph_layout), (
                    f"flag {flag} hands the NPU {sizes} in order {delivered}; the graph "
                    f"expects {graph_layout}")
