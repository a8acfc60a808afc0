"""Text lines of the automatic mixed-precision search (``Report.precision["auto"]``)."""

from __future__ import annotations


def auto_lines(auto: dict | None) -> list[str]:
    """The target and budget, the int8 baseline, each layer tried (kept or dropped, with
    what it cost), the layers chosen and the outcome."""
    if not auto:
        return []
    target = auto.get("target", {})
    goal = (f"SQNR {target['sqnr_db']:.2f} dB" if "sqnr_db" in target
            else f"accuracy {target.get('accuracy')}")
    budget = auto.get("budget", {})
    limits = []
    if budget.get("cycles"):
        limits.append(f"{budget['cycles']:,} NPU cycles")
    if budget.get("bytes"):
        limits.append(f"{budget['bytes']:,} bytes")
    lines = [f"  auto: target {goal}, budget {' and '.join(limits) or 'none'}"]
    base = auto.get("baseline", {})
    lines.append(f"    int8 baseline: {_point(base)}")
    for step in auto.get("steps", []):
        verdict = "kept" if step.get("kept") else f"dropped ({step.get('why', '')})"
        point = _point(step, base)
        lines.append(f"    + {step['layer']}: {point + '  ' if point else ''}{verdict}")
    if auto.get("chosen"):
        lines.append(f"    int16: {', '.join(auto['chosen'])}")
    if auto.get("outcome"):
        lines.append(f"    {auto['outcome']}")
    return lines


def _point(p: dict, base: dict | None = None) -> str:
    parts = []
    for key, unit, fmt in (("sqnr_db", " dB", "{:.2f}"), ("accuracy", "", "{:.4g}"),
                           ("cycles", " cycles", "{:,}"), ("bytes", " B", "{:,}")):
        if p.get(key) is None:
            continue
        text = fmt.format(p[key]) + unit
        if base and base.get(key) is not None:
            delta = p[key] - base[key]
            text += f" ({'+' if delta >= 0 else ''}{fmt.format(delta)})"
        parts.append(text)
    return ", ".join(parts)
