"""The HTML page's memory section: where the program is placed and why, each region's need
against its capacity as a bar, and the flash and RAM figures."""

from __future__ import annotations

import json
from html import escape

from .html_format import fmt_bytes, fmt_num, fmt_us, html_table, kv_table, scalars
from .labels import label


_CAPACITY = ("capacity", "capacity_bytes", "size", "size_bytes", "bytes")
_USED = ("used", "used_bytes", "need", "need_bytes", "needed", "required", "peak")
_PARTS = ("parts", "items", "contents", "breakdown", "uses")


def _first(d: dict, keys):
    return next((d[k] for k in keys if isinstance(d.get(k), (int, float))
                 and not isinstance(d.get(k), bool)), None)


_ROLE_PARTS = {
    "program": ("flash", ("constants", "npu_payloads", "tables", "named_data")),
    "ram": ("ram", ("planned_total", "method_allocator", "npu_scratch")),
    "fast_scratch": ("ram", ("fast_scratch",)),
}
"""What a region holding each role (``targets.MemoryRegion.holds``) is made of: the keys of
``memory["flash"]`` / ``memory["ram"]`` drawn as its bar's segments."""


def _role_parts(memory: dict, holds, need) -> list[tuple[str, float]]:
    """The segments of a region's need from the figures of the roles it holds, with the
    remainder as "other"; none when they do not add up to at most the need."""
    parts = []
    for role in holds or ():
        section, keys = _ROLE_PARTS.get(role, (None, ()))
        figures = memory.get(section) if isinstance(memory.get(section), dict) else {}
        parts += [(k, figures[k]) for k in keys if isinstance(figures.get(k), (int, float))
                  and figures[k] > 0]
    if not parts or not isinstance(need, (int, float)):
        return []
    rest = need - sum(b for _, b in parts)
    if rest < 0:
        return []
    return parts + ([("other", rest)] if rest > 0 else [])


def memory_regions(memory: dict) -> list[dict]:
    """``memory["regions"]`` normalised: name, capacity, used, fits, margin, parts
    [(name, bytes)], about (kind, NPU access, roles held); a list of dicts or a dict by
    name is accepted."""
    raw = memory.get("regions") if isinstance(memory, dict) else None
    if isinstance(raw, dict):
        raw = [dict(v, name=v.get("name", k)) for k, v in raw.items() if isinstance(v, dict)]
    out = []
    for r in raw or []:
        if not isinstance(r, dict):
            continue
        cap, used = _first(r, _CAPACITY), _first(r, _USED)
        fits = r.get("fits")
        if not isinstance(fits, bool):
            fits = None if cap is None or used is None else used <= cap
        margin = r.get("margin")
        if not isinstance(margin, (int, float)):
            margin = None if cap is None or used is None else cap - used
        parts = next((r[k] for k in _PARTS if r.get(k)), [])
        if isinstance(parts, dict):
            parts = list(parts.items())
        parts = [(p.get("name", p.get("what", "?")), _first(p, ("bytes", "size", "used", "need")))
                 if isinstance(p, dict) else tuple(p) for p in parts]
        parts = [(str(n), b) for n, b in parts if isinstance(b, (int, float)) and b > 0]
        if not parts:
            parts = _role_parts(memory, r.get("holds"), used)
        about = [str(r["kind"])] if r.get("kind") else []
        if isinstance(r.get("npu"), bool):
            about.append("the NPU reads it" if r["npu"] else "the NPU cannot read it")
        if r.get("holds"):
            about.append("holds " + ", ".join(map(str, r["holds"])))
        out.append(dict(name=str(r.get("name", r.get("region", "?"))), capacity=cap, used=used,
                        fits=fits, margin=margin, parts=parts, about="; ".join(about)))
    return out


_PART_COLOURS = ("#2f6bd1", "#2a9d5c", "#e07a1f", "#8e44ad", "#0e7490", "#b45309", "#be123c",
                 "#4d7c0f")


def _region_bar(region: dict) -> str:
    cap, used = region["capacity"], region["used"] or 0
    scale = max(cap or 0, used) or 1
    spans, x = [], 0.0
    parts = region["parts"] or [("used", used)]
    for n, (name, b) in enumerate(parts):
        w = 100 * b / scale
        colour = _PART_COLOURS[n % len(_PART_COLOURS)] if region["parts"] else \
            ("#2a9d5c" if region["fits"] is not False else "#d62839")
        spans.append(f'<span style="left:{x:.3f}%;width:{w:.3f}%;background:{colour}" '
                     f'title="{escape(label(name))}: {escape(fmt_bytes(b))}"></span>')
        x += w
    if cap and used > cap:
        spans.append(f'<span style="left:{100 * cap / scale:.3f}%;width:2px;background:#111" '
                     'title="capacity"></span>')
    return f'<div class="bar">{"".join(spans)}</div>'


PLACEMENTS = {
    "flash": "the weights stay in the program's memory and the NPU reads them in place; "
             "only the working memory is in SRAM",
    "sram": "the whole program, weights included, is in SRAM",
    "dedicated-sram": "program and working memory off-chip, the SRAM the NPU's cache",
}
"""What each memory placement (``compile(memory=...)``) means, in words."""


def _placement_html(placement: dict, program_in=None) -> str:
    """The chosen placement, what it means, why, and every placement tried
    (``flow.memory``)."""
    if not placement.get("memory"):
        return ""
    rows = []
    for row in placement.get("tried", []):
        if not row.get("compiled", True):
            why = escape(row.get("why", ""))
            rows.append((row["memory"], "-", "-", ("html", f'<span class="muted">{why}</span>')))
            continue
        needs = ", ".join(f"{n} {fmt_bytes(b)}" for n, b in row.get("regions", {}).items())
        fit = ("html", '<span class="ok">fits</span>') if row.get("fits") else (
            "html", f'<span class="over">does not fit</span>: short '
                    f'{fmt_bytes(row.get("shortfall", 0))}')
        rows.append((row["memory"], fmt_us(row["latency_us"]) if "latency_us" in row else "-",
                     needs, fit))
    chosen = str(placement["memory"])
    where = f" The program lies in <b>{escape(str(program_in))}</b>." if program_in else ""
    text = (f"<p>Memory placement <b>{escape(chosen)}</b>: "
            f"{escape(PLACEMENTS.get(chosen, chosen))} (chosen by "
            f"{escape(str(placement.get('asked', '')))}: "
            f"{escape(str(placement.get('why', '')))}).{where}</p>")
    return text + (html_table(("placement", "latency", "need per region", "fit"), rows)
                   if rows else "")


def memory_section(memory: dict, placement: dict | None = None) -> str:
    head = "<section id=\"memory\"><h2>Memory</h2>"
    if not memory:
        return head + "<p class=\"muted\">No memory figures in this report.</p></section>"
    out = [head, _placement_html(placement or {}, memory.get("program_in"))]
    regions = memory_regions(memory)
    if regions:
        rows = []
        for r in regions:
            if r["fits"] is None:
                verdict = ("html", '<span class="muted">no capacity</span>')
            elif r["fits"]:
                verdict = ("html", f'<span class="ok">fits</span>, margin {fmt_bytes(r["margin"])}')
            else:
                short = -r["margin"] if isinstance(r["margin"], (int, float)) else "?"
                verdict = ("html", f'<span class="over">does not fit</span>: over by '
                                   f'{fmt_bytes(short)}')
            pct = f" ({100 * r['used'] / r['capacity']:.1f}%)" if r["capacity"] and \
                r["used"] is not None else ""
            legend = ", ".join(f"{label(n)} {fmt_bytes(b)}" for n, b in r["parts"])
            name = ("html", f"<b>{escape(r['name'])}</b>" + (
                f'<div class="muted" style="font-size:12px">{escape(r["about"])}</div>'
                if r["about"] else ""))
            rows.append((name, ("html", _region_bar(r) + (
                f'<div class="muted" style="font-size:12px">{escape(legend)}</div>'
                if legend else "")),
                "-" if r["used"] is None else fmt_bytes(r["used"]) + pct,
                "-" if r["capacity"] is None else fmt_bytes(r["capacity"]), verdict))
        out.append(html_table(("region", "need against capacity", "need", "capacity", "fit"),
                          rows))
    if memory.get("program_in") and not (placement or {}).get("memory"):
        out.append(f"<p>The program lies in <b>{escape(str(memory['program_in']))}</b>.</p>")
    notes = memory.get("notes")
    if isinstance(notes, list) and notes:
        out.append("<ul>" + "".join(f"<li>{escape(str(n))}</li>" for n in notes) + "</ul>")
    summary = memory.get("summary")
    if isinstance(summary, dict) and scalars(summary):
        out.append("<h3>in total</h3>" + kv_table(scalars(summary)))
    for key, value in memory.items():  # anything else, shown as it is
        if key in ("regions", "summary", "notes", "program_in", "target"):
            continue
        out.append(f"<h3>{escape(SECTIONS.get(key, label(key)))}</h3>" + _generic(value))
    out.append("</section>")
    return "\n".join(out)


SECTIONS = {"flash": "the program (.pte): what it stores", "ram": "RAM: what it needs at run time"}


def _generic(value) -> str:
    """A nested value as a table (dict of scalars, list of dicts) or as text."""
    if isinstance(value, dict) and value and all(
            not isinstance(v, (dict, list)) or (isinstance(v, list) and all(
                not isinstance(e, (dict, list)) for e in v)) for v in value.values()):
        return kv_table(list(value.items()))
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        keys = list(dict.fromkeys(k for v in value for k in v))
        return html_table(keys, [[fmt_num(v.get(k, "")) if not isinstance(v.get(k), (dict, list))
                              else json.dumps(v.get(k), sort_keys=True) for k in keys]
                             for v in value])
    return f"<pre>{escape(json.dumps(value, indent=1, sort_keys=True, default=str))}</pre>"
