"""How the report names things for people: its keys as words, shapes as text, and the
estimated time of each op (shared by the text report and the HTML page)."""

from __future__ import annotations


LABELS = {
    "program": "program (.pte)", "constants": "CPU kernels' constants",
    "npu_payloads": "NPU payloads", "npu_weights": "NPU weights",
    "npu_commands": "NPU command streams", "named_data": "named data",
    "tables": "program tables", "planned": "planned memory pools",
    "planned_total": "planned memory", "inputs": "program inputs",
    "outputs": "program outputs", "io_planned": "inputs and outputs in planned memory",
    "npu_scratch": "NPU scratch", "npu_scratch_estimated": "NPU scratch is an estimate",
    "method_allocator": "method allocator (estimate)", "peak": "peak RAM",
    "flash_bytes": "program size (.pte, where it lies)", "ram_bytes": "RAM needed",
    "memory_fits": "fits",
    "tightest_region": "tightest region", "tightest_margin_bytes": "margin there",
    "npu_clock_hz": "NPU clock", "cpu_clock_hz": "CPU clock", "cpu_core": "CPU core",
    "npu_is_bound": "NPU figure is a lower bound", "method": "how it is estimated",
    "fast_scratch": "NPU fast scratch", "other": "other", "npu_reads_program":
    "NPU reads the program in place", "sqnr_db": "SQNR (dB)",
    "reference_sqnr_db": "quantized reference SQNR (dB)",
    "npu_cycles": "NPU compute cycles", "total_cycles": "total cycles",
    "inference_time_us": "inference time", "clock_hz": "clock", "macs": "MACs",
    "macs_per_cycle": "MACs per cycle", "npu_flash_bytes": "NPU payloads",
    "npu_total_cycles": "NPU total cycles",
    "npu_sram_bytes": "NPU SRAM", "read_only_bytes": "read-only data",
    "weights_bytes": "weights", "encoded_weights_bytes": "encoded weights",
    "scratch_bytes": "scratch", "fast_scratch_bytes": "fast scratch",
    "npu_ops": "NPU operations", "mac_bound_ratio": "cycles over MAC-bound cycles",
    "other_cycles": "cycles of operators the converter added",
    "npu_offchipflash_bytes": "off-chip flash peak", "npu_sram_peak_bytes": "SRAM peak",
}
"""Human names of the report's keys (a key without one is shown with spaces)."""


def label(key) -> str:
    key = str(key)
    return LABELS.get(key, key.replace("_", " "))


def shape_text(shape) -> str:
    """``(1, 3, 224, 224)`` -> ``1x3x224x224``."""
    return "x".join(map(str, shape)) if shape else "scalar"


def op_shapes(o) -> str:
    """An op's input and output shapes, ``1x3x8x8 -> 1x8x8x8``; "" when unknown."""
    if not o.output_shape and not o.input_shapes:
        return ""
    ins = ", ".join(shape_text(s) for s in o.input_shapes)
    return f"{ins} \u2192 {shape_text(o.output_shape)}" if ins else shape_text(o.output_shape)


def op_times(report) -> dict[str, tuple[float, str]]:
    """Node -> (estimated µs, basis): NPU ops from ``latency["npu_ops"]``, CPU ops from
    their latency rows."""
    lat = report.latency or {}
    by_ident = {o.ident: o.node for o in report.ops if o.ident}
    out: dict[str, tuple[float, str]] = {}
    for r in lat.get("rows") or []:
        if isinstance(r, dict) and isinstance(r.get("us"), (int, float)):
            node = by_ident.get(r.get("ident"), r.get("node"))
            us, _ = out.get(node, (0.0, ""))
            out[node] = (us + r["us"], str(r.get("basis", "")))
    for node, t in (lat.get("npu_ops") or {}).items():
        if isinstance(t, dict) and isinstance(t.get("us"), (int, float)):
            out[node] = (t["us"], str(t.get("basis", "")))
    return out
