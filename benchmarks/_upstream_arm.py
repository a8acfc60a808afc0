"""The baseline for ``benchmarks/ethos_u.py``: ExecuTorch's own Arm Ethos-U flow (1.5.1).

The flow is the one of ``executorch/backends/arm/scripts/aot_arm_compiler.py`` (``--delegate
--quantize --target=ethos-u55-128``) and of the public-API test
``backends/arm/test/public_api_bc/test_ethosu_flow.py``::

    spec = EthosUCompileSpec(target)                  # upstream's Vela defaults for the family
    gm = torch.export.export(model, x).module(check_guards=False)
    q = EthosUQuantizer(spec).set_global(get_symmetric_quantization_config(is_per_channel=True))
    m = prepare_pt2e(gm, q); [m(*s) for s in calibration]; m = convert_pt2e(m)
    edge = to_edge_transform_and_lower(torch.export.export(m, x),
                                       partitioner=[EthosUPartitioner(spec)],
                                       compile_config=EdgeCompileConfig(_check_ir_validity=False))
    edge.to_executorch()

Vela's figures: upstream's ``EthosUBackend.preprocess`` runs the ``vela`` command in-process
(``ethosu.vela.vela.main`` with ``--output-format=raw``) on each partition's TOSA flatbuffer,
in a temporary directory that it deletes. The ``vela`` command prints its summary and writes
``out_summary_<system>.csv`` from Regor's ``PerfReport``: that object is the source of every
number Vela reports. Here ``ethosu.regor.compile`` is wrapped (the wrapper calls the original
and returns its result unchanged) to keep each partition's ``PerfReport``; this project's
adapter reads the same object from the same Vela, so both sides' figures are Vela's own,
read the same way. Nothing in upstream's compilation is changed.

Benchmarks may import ``executorch.backends.arm``; product code never does.
"""

from __future__ import annotations

import contextlib
import io
import operator
import time

import torch

def perf_stats(compiled, clock_hz: float | None = None) -> dict:
    """Vela's estimates for one compiled partition, read from Regor's ``PerfReport`` the way
    this project's ``mcu_npu.npu.ethos_u.vela.vela_stats`` reads it (same field names)."""
    r = compiled.perf_report
    stats = {"npu_cycles": int(r.npuCycles), "total_cycles": int(r.totalCycles),
             "macs": int(r.macCount), "read_only_bytes": int(r.readOnlyPeakUsage),
             "weights_bytes": int(r.originalWeights),
             "encoded_weights_bytes": int(r.encodedWeights), "npu_ops": int(r.npuOps),
             "cpu_ops": int(r.cpuOps)}
    with contextlib.suppress(AttributeError):
        stats["scratch_bytes"] = int(compiled.scratch.size)
        stats["fast_scratch_bytes"] = int(compiled.scratch_fast.size)
    stats["npu_sram_bytes"] = 0
    for name, memory in r.memories.items():
        name = str(name).lower()
        if name not in ("shram", "lutram"):
            stats[f"npu_{name}_bytes"] = int(memory.peakUsage)
    if clock_hz:
        stats["inference_time_us"] = round(r.totalCycles / clock_hz * 1e6, 3)
    return stats


@contextlib.contextmanager
def capture_regor():
    """Yields a list that receives (compiled model, seconds) of every Regor compile."""
    from ethosu import regor

    calls: list = []
    original = regor.compile

    def compile_and_keep(*args, **kwargs):
        t = time.perf_counter()
        compiled = original(*args, **kwargs)
        calls.append((compiled, time.perf_counter() - t))
        return compiled

    regor.compile = compile_and_keep
    try:
        yield calls
    finally:
        regor.compile = original


def _name(node) -> str:
    target = node.target
    return getattr(target, "__name__", None) or str(target)


def _is_qdq(node) -> bool:
    name = f"{_name(node)} {node.target}"
    return "quantize_per_" in name


def _constant_inputs(ep) -> set[str]:
    sig = ep.graph_signature
    names = set(sig.inputs_to_parameters) | set(sig.inputs_to_buffers)
    names |= set(getattr(sig, "inputs_to_lifted_tensor_constants", {}) or {})
    return names


def compute_nodes(ep):
    """Call nodes the project's report would count: not quantize/dequantize, not tuple
    access, not a delegate call, not computed from constants alone."""
    consts = _constant_inputs(ep)
    const_nodes: set = set()
    out = []
    for node in ep.graph_module.graph.nodes:
        if node.op == "placeholder":
            if node.name in consts:
                const_nodes.add(node)
            continue
        if node.op == "get_attr":
            const_nodes.add(node)
            continue
        if node.op != "call_function":
            continue
        if all(i in const_nodes for i in node.all_input_nodes):  # incl. no inputs (zeros)
            const_nodes.add(node)
            continue
        if node.target is operator.getitem or _is_qdq(node) or \
                "executorch_call_delegate" in _name(node):
            continue
        out.append(node)
    return out


def delegation(edge) -> dict:
    """Compute ops inside Ethos-U delegates vs. left in the top-level graph, with MACs."""
    from mcu_npu.report import node_macs

    ep = edge.exported_program()
    gm = ep.graph_module
    npu_ops = cpu_ops = npu_macs = cpu_macs = 0
    cpu_kinds: dict[str, int] = {}
    lowered = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and "executorch_call_delegate" in _name(node):
            lm = getattr(gm, node.args[0].target)
            lowered.append(lm)
            inner = compute_nodes(lm.original_module)
            npu_ops += len(inner)
            npu_macs += sum(node_macs(n) for n in inner)
    for node in compute_nodes(ep):
        cpu_ops += 1
        cpu_macs += node_macs(node)
        kind = _name(node).removeprefix("aten.").removesuffix(".default")
        cpu_kinds[kind] = cpu_kinds.get(kind, 0) + 1
    return {"ops_total": npu_ops + cpu_ops, "ops_on_npu": npu_ops, "ops_on_cpu": cpu_ops,
            "npu_macs": npu_macs, "macs": npu_macs + cpu_macs, "partitions": len(lowered),
            "cpu_op_kinds": cpu_kinds,
            "payload_bytes": [len(lm.processed_bytes) for lm in lowered]}


def quantize_upstream(model: torch.nn.Module, example_inputs: tuple, calibration: list,
                      target: str = "ethos-u55-128") -> torch.fx.GraphModule:
    """Upstream's Arm PTQ of ``model`` for ``target``: ``EthosUQuantizer`` with
    ``get_symmetric_quantization_config(is_per_channel=True)``, PT2E prepare -> calibrate on
    ``calibration`` -> convert; the converted GraphModule runs in PyTorch."""
    from executorch.backends.arm import (EthosUCompileSpec, EthosUQuantizer,
                                         get_symmetric_quantization_config)
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    spec = EthosUCompileSpec(target)
    gm = torch.export.export(model.eval(), example_inputs).module(check_guards=False)
    quantizer = EthosUQuantizer(spec).set_global(
        get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(gm, quantizer)
    for sample in calibration:
        prepared(*sample)
    return convert_pt2e(prepared)


def compile_upstream(model: torch.nn.Module, example_inputs: tuple, calibration: list,
                     target: str, keep_pte: bool = False) -> dict:
    """Run upstream's Ethos-U flow; the figures in the dict named like the project's.
    ``keep_pte``: the ``.pte`` bytes too, under "pte"."""
    from executorch.backends.arm import EthosUCompileSpec, EthosUPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    with capture_regor() as calls:
        t0 = time.perf_counter()
        spec = EthosUCompileSpec(target)
        converted = quantize_upstream(model, example_inputs, calibration, target)
        t1 = time.perf_counter()
        edge = to_edge_transform_and_lower(
            torch.export.export(converted, example_inputs),
            partitioner=[EthosUPartitioner(spec)],
            compile_config=EdgeCompileConfig(_check_ir_validity=False))
        t2 = time.perf_counter()
        info = delegation(edge)  # before to_executorch, which memory-plans the graph
        t_info = time.perf_counter() - t2
        et = edge.to_executorch()
        pte = bytes(et.buffer)
        t3 = time.perf_counter()
    times = {"compile_s": t3 - t0 - t_info, "quantize_s": t1 - t0, "lower_s": t2 - t1,
             "to_executorch_s": t3 - t2 - t_info, "vela_s": sum(s for _, s in calls)}
    flags = list(spec.compiler_flags)
    clock = _clock_hz(flags)
    parts = [perf_stats(c, clock) for c, _ in calls]
    for stats, size in zip(parts, info.pop("payload_bytes")):
        stats["npu_flash_bytes"] = size
    out = {"ok": True, **times, **info, "pte_bytes": len(pte), "partition_stats": parts,
           "vela_flags": flags, "tosa_spec": str(spec.tosa_spec)}
    if keep_pte:
        out["pte"] = pte
    return out


def arm_flow(model: torch.nn.Module, example_inputs: tuple, calibration: list, target: str,
             options: dict) -> dict:
    """Upstream's flow as a compile flow of ``mcu_npu.grid`` (named
    ``"_upstream_arm:arm_flow"``): the ``.pte``, what runs on the NPU, and every figure of
    ``compile_upstream`` as the row's ``extra``; the summary Vela prints is left out of the
    grid's output. It takes none of ``mcu_npu.compile``'s options."""
    if options:
        raise ValueError(f"upstream's Arm flow takes no options, given {sorted(options)}")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            r = compile_upstream(model, example_inputs, calibration, target, keep_pte=True)
    except Exception as exc:
        if "tosa_serializer" not in str(exc):
            raise
        raise RuntimeError(f"{type(exc).__name__}: {exc} -- executorch.backends.arm needs the "
                           f"TOSA serializer: pip install --no-deps tosa-tools==2026.5.0") from exc
    pte = r.pop("pte")
    del r["ok"]
    return {"pte": pte, "ops_on_npu": r["ops_on_npu"], "ops_total": r["ops_total"],
            "partitions": r["partitions"], "extra": r}


def _clock_hz(flags: list[str]) -> float | None:
    """core_clock of the system config upstream selected, from Vela's own .ini parsing."""
    try:
        from ethosu.vela import vela as _cli  # noqa: F401  (import order: see vela_run.py)
        import os

        from ethosu.vela import architecture_features as af
        from ethosu.vela.architecture_features import ArchitectureFeatures

        opts = dict(f.removeprefix("--").split("=", 1) for f in flags if "=" in f)
        ini = opts.get("config", "Arm/vela.ini")
        if not os.path.isabs(ini):
            ini = os.path.join(af.CONFIG_FILES_PATH, ini)
        arch = ArchitectureFeatures(
            vela_config_files=[ini], accelerator_config=opts["accelerator-config"],
            system_config=opts["system-config"], memory_mode=opts["memory-mode"],
            max_blockdep=ArchitectureFeatures.MAX_BLOCKDEP, verbose_config=False,
            arena_cache_size=None)
        return float(arch.core_clock)
    except Exception:  # the clock only turns cycles into microseconds
        return None
