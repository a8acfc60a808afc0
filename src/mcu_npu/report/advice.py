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
    out = [line for line in [boundary_advice(report)] if line]
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


def boundary_advice(report) -> str:
    """The ``inputs=`` declaration that would take the most CPU work off the program's
    boundary: for the float input whose quantize / transpose costs the most (the latency
    model's ``boundary_us``), "" when no float input pays any."""
    lat = report.latency or {}
    total, paid = lat.get("latency_us"), lat.get("boundary_us") or {}
    declared = {k: v for k, v in paid.items() if k.startswith("input ") and v > 0}
    if not declared or not isinstance(total, (int, float)) or total <= 0:
        return ""
    where = max(declared, key=declared.get)
    index = int(where.split()[1])
    inputs = (report.program_io or {}).get("inputs") or []
    info = inputs[index] if index < len(inputs) else {}
    if info.get("dtype") not in ("float32", "float"):
        return ""
    kinds = sorted({r["kind"] for r in lat.get("rows") or [] if r.get("boundary") == where})
    shape = list(info.get("shape") or [])
    image = len(shape) == 4 and shape[1] in (1, 3, 4)
    # an image goes channels last (the NPU's order, so nothing is transposed anywhere)
    layout = "channels_last" if image or (len(shape) >= 3 and "transpose" in kinds) \
        else "channels_first"
    dtype = "uint8" if image else "int8"
    spec = f'InputSpec(dtype="{dtype}", layout="{layout}", mean=..., std=...)'
    flags = f"--input-dtype {dtype} --input-layout {layout}"
    return (f"input {index} ({info.get('name', '?')}) is float {'NCHW' if image else 'data'}: "
            f"its {' and '.join(kinds)} on the CPU cost {declared[where]:,.0f} \u00b5s, "
            f"{100 * declared[where] / total:.0f}% of the estimated latency. If the sensor "
            f"gives {dtype} {'pixels' if image else 'values'}, compile with "
            f"inputs={{{index}: {spec}}} ({flags}): the program takes them as they are and "
            "the NPU converts them (one integer mean and one std for all channels fold into "
            "the input's quantization, a per-channel std into the first convolution; "
            "per-channel means before a padded convolution are a depthwise 1x1 layer on the "
            "NPU).")


def _npu_added(report) -> float:
    """µs of the NPU operators the converter added (boundary transposes, reshapes), from
    Vela's per-layer cycles; 0 without them."""
    us = 0.0
    for p in report.partitions:
        other, clock = p.stats.get("other_cycles"), p.stats.get("clock_hz")
        if isinstance(other, (int, float)) and clock:
            us += other / clock * 1e6
    return us
