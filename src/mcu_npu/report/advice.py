"""What the report tells the user to do: a warning when the program is inaccurate, and a
"what to do" line when work around the NPU (quantize, dequantize, layout transposes) or the
CPU's ops dominate the latency. Each line names only what the project offers."""

from __future__ import annotations

POOR_SQNR_DB = 10.0
"""Below this SQNR against the float model the outputs are mostly quantization error."""
GAP_DB = 1.0
"""The host run more than this behind the quantized reference breaks the numerics contract."""
DOMINANT = 0.25
"""A share of the estimated latency that gets a "what to do" line."""

BOUNDARY_KINDS = ("quantize", "dequantize", "transpose")


def accuracy_warning(accuracy: dict) -> str:
    """The warning for a poor SQNR (or a host run behind its reference), "" when fine."""
    sqnr, ref = accuracy.get("sqnr_db"), accuracy.get("reference_sqnr_db")
    if not isinstance(sqnr, (int, float)):
        return ""
    if sqnr < POOR_SQNR_DB:
        return (f"Poor accuracy: SQNR {sqnr:.2f} dB against the float model (below "
                f"{POOR_SQNR_DB:g} dB the outputs are mostly quantization error). Calibrate with "
                "representative inputs (calibration=), find the layer losing it with "
                "accuracy_samples= (per-layer error), and raise that layer to int16 "
                "activations (precision=, or precision=\"auto\").")
    if isinstance(ref, (int, float)) and ref - sqnr > GAP_DB:
        return (f"The host run's SQNR ({sqnr:.2f} dB) is {ref - sqnr:.2f} dB behind the "
                f"quantized reference's ({ref:.2f} dB): the program computes differently from "
                "its reference; accuracy_samples= shows the layer where they part.")
    return ""


def latency_advice(report) -> list[str]:
    """One line per kind of work dominating the estimated latency, with what to do."""
    lat = report.latency or {}
    total = lat.get("latency_us")
    rows = [r for r in lat.get("rows") or [] if isinstance(r, dict)]
    if not isinstance(total, (int, float)) or total <= 0 or not rows:
        return []
    out = []
    cpu = [r for r in rows if r.get("runs_on") != "npu"]
    quant = sum(r["us"] for r in cpu if r.get("kind") in ("quantize", "dequantize"))
    moves = sum(r["us"] for r in cpu if r.get("kind") == "transpose")
    if (quant + moves) / total >= DOMINANT:
        parts = [f"quantize/dequantize {quant:,.0f} \u00b5s" if quant else "",
                 f"NCHW<->NHWC transposes {moves:,.0f} \u00b5s" if moves else ""]
        todo = []
        if moves:
            todo.append("give a channels_last example input (x.to(memory_format="
                        "torch.channels_last), calibration alike) so no transpose is needed")
        if quant and not report.io:
            todo.append("compile with io=\"int8\" (--io int8) so the firmware passes the NPU's "
                        "int8 tensors and nothing is quantized on the CPU")
        line = (f"The work around the NPU ({' and '.join(p for p in parts if p)}) is "
                f"{100 * (quant + moves) / total:.0f}% of the estimated latency")
        out.append(line + (": " + "; ".join(todo) + "." if todo else "."))
    added = _npu_added(report)
    if added / total >= DOMINANT / 2:
        out.append(f"Operators the converter added inside the NPU graph (layout transposes of "
                   f"an NCHW input or output, reshapes) take {added:,.0f} \u00b5s, "
                   f"{100 * added / total:.0f}% of the estimated latency: a channels_last "
                   "example input (x.to(memory_format=torch.channels_last)) needs no "
                   "transpose.")
    ops = [r for r in cpu if r.get("kind") not in BOUNDARY_KINDS + ("copy",)]
    cpu_ops = sum(r["us"] for r in ops)
    if ops and cpu_ops / total >= DOMINANT:
        slow = max(ops, key=lambda r: r["us"])
        out.append(f"CPU ops are {100 * cpu_ops / total:.0f}% of the estimated latency "
                   f"({len(ops)} op(s); the slowest {slow['node']}, {slow['us']:,.0f} \u00b5s): "
                   "the op table says why each is not on the NPU.")
    return out


def _npu_added(report) -> float:
    """µs of the NPU operators the converter added (boundary transposes, reshapes), from
    Vela's per-layer cycles; 0 without them."""
    us = 0.0
    for p in report.partitions:
        other, clock = p.stats.get("other_cycles"), p.stats.get("clock_hz")
        if isinstance(other, (int, float)) and clock:
            us += other / clock * 1e6
    return us
