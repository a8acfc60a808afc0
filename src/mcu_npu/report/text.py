"""The report's text views of the estimators' figures: memory, placement, the per-layer
table and the stream (``Report.__str__`` and the HTML page read them)."""

from __future__ import annotations

import math


def placement_lines(placement: dict) -> list[str]:
    """Where the program lives and why, and every placement tried (text of the report)."""
    if not placement.get("memory"):
        return []
    lines = [f"  placement: {placement['memory']} ({placement.get('asked', '')}: "
             f"{placement.get('why', '')})"]
    for row in placement.get("tried", []):
        if not row.get("compiled", True):
            lines.append(f"    {row['memory']:<15} {row.get('why', '')}")
            continue
        latency = f"{row['latency_us']:,.1f} us" if "latency_us" in row else "latency ?"
        needs = ", ".join(f"{name} {need:,}" for name, need in row.get("regions", {}).items())
        fits = "fits" if row.get("fits") else f"does NOT fit (short {row.get('shortfall', 0):,})"
        lines.append(f"    {row['memory']:<15} {latency:>14}  {fits}; needs {needs}")
    return lines


def _b(n) -> str:
    return "?" if n is None else f"{n:,}"


def memory_lines(memory: dict) -> list[str]:
    """The memory figures as text lines (a blank line first; nothing when ``memory`` is
    empty), for the report's text."""
    if not memory:
        return []
    f, ram = memory["flash"], memory["ram"]
    flash = (f"  flash: program {_b(f['program'])} = constants {_b(f['constants'])} + NPU "
             f"payloads {_b(f['npu_payloads'])} (weights {_b(f['npu_weights'])}, commands "
             f"{_b(f['npu_commands'])}) + program tables {_b(f.get('tables'))} + named data "
             f"{_b(f.get('named_data'))}")
    pools = ", ".join(f"pool {i}: {n:,}" for i, n in enumerate(ram["planned"]) if i)
    scratch = " (estimate)" if ram.get("npu_scratch_estimated") else ""
    lines = ["", "memory (bytes)", flash,
             f"  RAM: planned {ram['planned_total']:,} ({pools or 'none'}; inputs "
             f"{ram['inputs']:,}, outputs {ram['outputs']:,}) + method allocator "
             f"~{ram['method_allocator']:,} (estimate) + NPU scratch "
             f"{ram['npu_scratch']:,}{scratch} = peak {ram['peak']:,}"]
    if ram.get("fast_scratch"):
        lines.append(f"  Vela fast scratch {ram['fast_scratch']:,}")
    rows = [("region", "kind", "size", "holds", "need", "margin", "fits")]
    for r in memory.get("regions", []):
        fits = {True: "yes", False: "NO"}.get(r.get("fits"), "not checked")
        rows.append((r["name"], r["kind"], _b(r["size"]), "+".join(r["holds"]) or "-",
                     _b(r["need"]), _b(r.get("margin")), fits))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
              for row in rows]
    lines += [f"  note: {n}" for n in memory.get("notes", [])]
    return lines


def layer_lines(rows: list[dict]) -> list[str]:
    """The per-layer table as text lines (the rows in their order)."""
    header = ("node", "op", "runs on", "host", "SQNR dB", "ref dB", "gap dB", "max steps",
              "loss dB", "measured at")
    table = [header]
    for r in rows:
        at = r["measured_at"] if r["measured_at"] != r["node"] else ""
        table.append((r["node"], r["op"], r["runs_on"], r["source"], _text(r["sqnr_db"]),
                      _text(r["reference_sqnr_db"]), _text(r["gap_db"]),
                      _text(r["max_error_steps"]), _text(r["loss_db"]), at))
    widths = [max(len(t[i]) for t in table) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip() for t in table]


def _text(x) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}" if math.isfinite(x) else str(x)


def stream_lines(stream: dict) -> list[str]:
    """The stream's figures as report text lines (none for an empty ``stream``)."""
    if not stream or stream.get("per_call_us") is None:
        return []
    line = f"stream: {stream['per_call_us']:,.1f} us per call (estimate)"
    if stream.get("state_tensors"):
        line += f", state {stream['state_bytes']:,} B kept between calls"
    if "frame_period_ms" in stream:
        verdict = "fits" if stream["real_time"] else "DOES NOT FIT"
        line += (f"; at one call every {stream['frame_period_ms']:g} ms a call {verdict}: "
                 f"{100 * stream['load']:.2f}% of the period, "
                 f"{stream['margin_us']:,.1f} us to spare")
    return [line]
