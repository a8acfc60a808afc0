"""A grid of compiles (``mcu_npu.grid``: compare, sweep) as one self-contained HTML page, in
the compile report's style (inline CSS and SVG, nothing fetched): headline cards, latency
against accuracy as a scatter (marker area by RAM, the Pareto front in green, rows that do
not fit outlined in red), each row's latency split into NPU and CPU time, flash and RAM, and
the table. ``rows`` are the grid's rows (read by attribute), ``head``/``cells`` the table's
texts as the text table shows them."""

from __future__ import annotations

import math
from html import escape

from .html import CSS
from .html_format import card, fmt_bytes, fmt_us, html_table
from .placement_svg import KERNEL_COLOURS, clip

FRONT, FITS, OVER = "#2a9d5c", "#2f6bd1", "#e11d48"
NPU, CPU = KERNEL_COLOURS["npu"], KERNEL_COLOURS["cortex-m"]
FLASH, RAM = "#7c3aed", "#d97706"
GRID_CSS = "tr.front td:first-child{border-left:5px solid #2a9d5c}tr.failed td{color:#9f1239}"


def render_grid(rows, front, title: str, fixed: dict, head: list, cells: list,
                numeric=frozenset(), objectives=()) -> str:
    """The page: ``front`` the Pareto rows, ``fixed`` what every row shares, ``numeric`` the
    headings of right-aligned columns, ``objectives`` the front's (field, "min"/"max")."""
    on_front = [any(r is f for f in front) for r in rows]
    labels = [_label(c, head) for c in cells]
    body = [f"<h1>{escape(title)}</h1>",
            f'<div class="sub">{escape(", ".join(f"{k} {v}" for k, v in fixed.items()))}</div>'
            if fixed else "", _cards(rows, front, labels, objectives),
            _scatter_section(rows, on_front, labels, objectives),
            _bars_section(rows, labels), _table_section(rows, on_front, head, cells, numeric),
            _warnings_section(rows, labels)]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{escape(title)}</title>\n<style>{CSS}{GRID_CSS}</style>\n</head>\n"
            "<body>\n<main>\n" + "\n".join(b for b in body if b) + "\n</main>\n</body>\n</html>\n")


def _label(cells: list, head: list) -> str:
    """A row's name on the charts: its asked-for cells (model, target, ...)."""
    n = head.index("fits")
    return " \u00b7 ".join(cells[:n])


def _cards(rows, front, labels, objectives) -> str:
    ok = [r for r in rows if r.ok]
    fitting = [r for r in ok if r.fits is not False and r.latency_us is not None]
    out = [card("cells", str(len(rows)), f"{len(ok)} compiled, {len(rows) - len(ok)} failed",
                bad=len(ok) < len(rows)),
           card("Pareto front", f"{len(front)} rows", "no row that fits beats them on " + ", ".join(
                    k for k, _ in objectives))]
    if fitting:
        fast = min(fitting, key=lambda r: r.latency_us)
        out.append(card("fastest that fits", fmt_us(fast.latency_us),
                        labels[rows.index(fast)]))
    scored = [r for r in fitting if isinstance(r.sqnr_db, (int, float))]
    if scored:
        best = max(scored, key=lambda r: r.sqnr_db)
        out.append(card("most accurate that fits", f"{best.sqnr_db:.2f} dB",
                        labels[rows.index(best)]))
    return f'<div class="cards">{"".join(out)}</div>'


SQNR_AXIS = ("sqnr_db", "SQNR against float, dB", 1.0, "ram_bytes", "RAM")
RAM_AXIS = ("ram_bytes", "RAM, KiB", 1 / 1024, "flash_bytes", "flash")
"""(row field, axis title, scale, marker-area field, its name) of the scatter's y axis."""


def _scatter_section(rows, on_front, labels, objectives) -> str:
    points = [(r, f, lab) for r, f, lab in zip(rows, on_front, labels)
              if r.ok and isinstance(r.latency_us, (int, float)) and r.latency_us > 0
              and isinstance(r.sqnr_db, (int, float)) and math.isfinite(r.sqnr_db)
              and isinstance(r.ram_bytes, (int, float))]
    if not points:
        return ""
    sqnrs = [r.sqnr_db for r, _, _ in points]
    axis = SQNR_AXIS if max(sqnrs) - min(sqnrs) >= 0.5 else RAM_AXIS
    legend = ('<div class="legend">' + "".join(
        f'<span><span class="chip" style="background:{c};{s}"></span>{escape(t)}</span>'
        for c, s, t in ((FRONT, "", "on the Pareto front"), (FITS, "", "fits, dominated"),
                        ("#fff", f"border:2px solid {OVER}", "does not fit the memory")))
        + f"<span>marker area: {axis[4]}</span></div>")
    if axis is SQNR_AXIS:
        title, about = ("Latency against accuracy", "Estimated latency (lower is better) "
                        "against the SQNR of the program's outputs against the float model's "
                        "(higher is better)")
    else:
        title, about = ("Latency against RAM", f"Estimated latency against the RAM the "
                        f"program needs (lower is better for both); the SQNR against the "
                        f"float model is {min(sqnrs):.2f} to {max(sqnrs):.2f} dB on every row")
    return (f"<section id=\"scatter\"><h2>{title}</h2><p class=\"muted\">{escape(about)}; "
            "hover a point for its figures.</p>" + legend + _scatter_svg(points, axis)
            + "</section>")


def _scatter_svg(points, axis, width=1000, height=480) -> str:
    key, y_title, y_scale, area_key, _ = axis
    left, right, top, bottom = 70, 230, 16, 48
    xs = [r.latency_us for r, _, _ in points]
    ys = [getattr(r, key) * y_scale for r, _, _ in points]
    log = max(xs) / min(xs) > 20
    fx = (lambda v: math.log10(v)) if log else (lambda v: v)
    x0, x1 = _span([fx(v) for v in xs], 0 if not log else None)
    y0, y1 = _span(ys, None if key == "sqnr_db" else 0)
    area = [getattr(r, area_key) or 0 for r, _, _ in points]
    big = max(area) or 1

    def px(v):
        return left + (fx(v) - x0) / (x1 - x0) * (width - left - right)

    def py(v):
        return height - bottom - (v - y0) / (y1 - y0) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" style="background:#fff;border:1px solid #d8dce3;'
           f'border-radius:8px">']
    for t in _ticks(x0, x1, log):
        x = left + (t - x0) / (x1 - x0) * (width - left - right)
        value = 10 ** t if log else t
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom}" '
                   f'stroke="#eef0f4"/><text x="{x:.1f}" y="{height - bottom + 16}" '
                   f'font-size="11" text-anchor="middle">{value:,.{0 if value >= 1 else 1}f}'
                   f'</text>')
    for t in _ticks(y0, y1, False):
        y = py(t)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" '
                   f'stroke="#eef0f4"/><text x="{left - 6}" y="{y + 4:.1f}" font-size="11" '
                   f'text-anchor="end">{t:g}</text>')
    mid = (top + height - bottom) / 2
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 10}" font-size="12" '
               f'text-anchor="middle">latency, \u00b5s{" (log scale)" if log else ""}</text>'
               f'<text x="16" y="{mid}" font-size="12" text-anchor="middle" '
               f'transform="rotate(-90 16 {mid})">{escape(y_title)}</text>')
    marks, names = [], {}
    for (r, front, lab), b, v in sorted(zip(points, area, ys), key=lambda p: -p[1]):
        radius = 4 + 10 * math.sqrt(b / big)
        fill, stroke = (FRONT if front else FITS, "#fff") if r.fits is not False \
            else ("#fff", OVER)
        tip = (f"{lab}: {fmt_us(r.latency_us)}, SQNR {r.sqnr_db:.2f} dB, RAM "
               f"{fmt_bytes(r.ram_bytes)}, flash {fmt_bytes(r.flash_bytes)}")
        x, y = px(r.latency_us), py(v)
        marks.append(f'<g><circle cx="{x:.1f}" cy="{y:.1f}" r="{radius:.1f}" fill="{fill}" '
                     f'fill-opacity="0.8" stroke="{stroke}" stroke-width="2"/>'
                     f'<title>{escape(tip)}</title></g>')
        spot = names.setdefault((round(x), round(y)), [x, y, radius, []])
        spot[2] = max(spot[2], radius)
        spot[3].append(lab)
    out += marks + _point_labels(names.values(), [(x - r, y - r, x + r, y + r)
                                                  for x, y, r, _ in names.values()],
                                 (left, top, width, height - bottom))
    out.append("</svg>")
    return "".join(out)


def _point_labels(spots, markers, area: tuple[float, float, float, float]) -> list[str]:
    """One label per point (the names of rows drawn on the same spot joined), right or left
    of it, moved down or up a line at a time, inside ``area`` (x0, y0, x1, y1), until
    it overlaps no marker and no label placed before it (a leader line then joins it to its
    point)."""
    placed, out = list(markers), []
    for x, y, radius, names in sorted(spots, key=lambda s: (s[1], s[0])):
        text = clip(" / ".join(names), 60)
        w = 6.2 * len(text)
        where = (0.0, x + radius + 3, "start")
        for dy in (0, *(k * sign * 13 for k in range(1, 10) for sign in (1, -1))):
            for x0, anchor in ((x + radius + 3, "start"), (x - radius - 3, "end")):
                left = x0 if anchor == "start" else x0 - w
                box = (left, y + dy - 9, left + w, y + dy + 4)
                if area[0] <= box[0] and area[1] <= box[1] and box[2] <= area[2] and \
                        box[3] <= area[3] and not any(
                        box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3]
                        for b in placed):
                    where = (dy, x0, anchor)
                    break
            else:
                continue
            break
        dy, x0, anchor = where
        left = x0 if anchor == "start" else x0 - w
        placed.append((left, y + dy - 9, left + w, y + dy + 4))
        if dy:  # a leader from the point to its moved label
            out.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x0:.1f}" y2="{y + dy:.1f}" '
                       f'stroke="#9ca3af" stroke-width="0.8"/>')
        out.append(f'<text x="{x0:.1f}" y="{y + dy + 4:.1f}" font-size="11" '
                   f'text-anchor="{anchor}">{escape(text)}</text>')
    return out


def _span(values, floor) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.12 or abs(hi) * 0.1 or 1.0
    lo = lo - pad if floor is None else max(floor, lo - pad)
    return lo, hi + pad


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    """About six round tick positions in [lo, hi] (on a log axis: exponents of 1, 2, 5)."""
    if log:
        out = [math.log10(m * 10 ** e) for e in range(math.floor(lo), math.ceil(hi) + 1)
               for m in (1, 2, 5)]
        return [t for t in out if lo <= t <= hi]
    raw = (hi - lo) / 6
    step = min((m * 10 ** math.floor(math.log10(raw)) for m in (1, 2, 5, 10)),
               key=lambda s: abs(s - raw))
    first = math.ceil(lo / step) * step
    return [round(first + k * step, 10) for k in range(int((hi - first) / step) + 1)]


def _bars_section(rows, labels, width=1000, label_w=300, bar_h=12) -> str:
    shown = [(r, lab) for r, lab in zip(rows, labels)
             if r.ok and isinstance(r.latency_us, (int, float))]
    if not shown:
        return ""
    span = (width - label_w - 20) / 2 - 90
    top_us = max(r.latency_us for r, _ in shown) or 1
    top_b = max(max(r.flash_bytes or 0, r.ram_bytes or 0) for r, _ in shown) or 1
    step = 2 * bar_h + 10
    h = len(shown) * step + 30
    mid = label_w + span + 100
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
           f'viewBox="0 0 {width} {h}"><text x="{label_w}" y="14" font-size="12" '
           f'font-weight="600">latency: NPU + CPU</text><text x="{mid}" y="14" font-size="12" '
           f'font-weight="600">flash and RAM</text>']
    for n, (r, lab) in enumerate(shown):
        y = 24 + n * step
        npu = r.npu_us or 0
        cpu = max(r.latency_us - npu, 0)
        wn, wc = span * npu / top_us, span * cpu / top_us
        out.append(f'<text x="{label_w - 6}" y="{y + bar_h + 4}" font-size="12" '
                   f'text-anchor="end"{" fill=" + repr(OVER) if r.fits is False else ""}>'
                   f'{escape(clip(lab, 44))}</text>'
                   f'<rect x="{label_w}" y="{y + bar_h // 2}" width="{wn:.1f}" height="{bar_h}" '
                   f'fill="{NPU}"><title>NPU {escape(fmt_us(npu))}</title></rect>'
                   f'<rect x="{label_w + wn:.1f}" y="{y + bar_h // 2}" width="{wc:.1f}" '
                   f'height="{bar_h}" fill="{CPU}"><title>CPU {escape(fmt_us(cpu))}</title>'
                   f'</rect><text x="{label_w + wn + wc + 5:.1f}" y="{y + bar_h + 4}" '
                   f'font-size="11">{escape(fmt_us(r.latency_us))}</text>')
        for k, (what, value, colour) in enumerate((("flash", r.flash_bytes, FLASH),
                                                   ("RAM", r.ram_bytes, RAM))):
            w = span * (value or 0) / top_b
            yy = y + k * (bar_h + 1)
            out.append(f'<rect x="{mid}" y="{yy}" width="{w:.1f}" height="{bar_h}" '
                       f'fill="{colour}"><title>{what} {escape(fmt_bytes(value))}</title></rect>'
                       f'<text x="{mid + w + 5:.1f}" y="{yy + bar_h - 2}" font-size="10">'
                       f'{what} {(value or 0) / 1024:,.1f} KiB</text>')
    out.append("</svg>")
    legend = ('<div class="legend">' + "".join(
        f'<span><span class="chip" style="background:{c}"></span>{t}</span>'
        for c, t in ((NPU, "NPU time"), (CPU, "CPU time"), (FLASH, "flash"), (RAM, "RAM")))
        + "</div>")
    return ("<section id=\"bars\"><h2>Latency and memory per row</h2><p class=\"muted\">"
            "Estimates from each compile's report: the latency model's NPU and CPU time, the "
            "program's flash and RAM need; a name in red does not fit its target's memory."
            "</p>" + legend + f'<div class="scroll">{"".join(out)}</div></section>')


def _table_section(rows, on_front, head, cells, numeric) -> str:
    asked = head.index("fits")
    fits = head.index("fits")
    body = [[("html", '<span class="over">NO</span>') if i == fits and r.fits is False else v
             for i, v in enumerate(c)] for r, c in zip(rows, cells) if r.ok]
    attrs = [' class="front"' if front else "" for r, front in zip(rows, on_front) if r.ok]
    failed = [c[:asked] + [c[asked][len("error: "):]] for r, c in zip(rows, cells)
              if not r.ok]
    out = ["<section id=\"rows\"><h2>Rows</h2><p class=\"muted\">Green edge: on the "
           "Pareto front. SQNR and ref dB: the program run on the host and the quantized "
           "reference against the float model; top-1: samples whose argmax matches the "
           "float model's; a latency marked &gt;= has a lower bound for its NPU part (MACs at "
           "the NPU's peak: its compiler gives no cycle count).</p>"]
    if body:
        out.append(html_table(head, body, numeric=tuple(i for i, h in enumerate(head)
                                                        if h in numeric), row_attrs=attrs))
    if failed:
        out.append(f"<h3>failed ({len(failed)})</h3>"
                   + html_table(head[:asked] + ["error"], failed,
                                row_attrs=[' class="failed"'] * len(failed)))
    return "".join(out) + "</section>"


def _warnings_section(rows, labels) -> str:
    seen: dict[str, list[str]] = {}
    for r, lab in zip(rows, labels):
        for w in r.warnings:
            seen.setdefault(w, []).append(lab)
    if not seen:
        return ""
    items = "".join(f"<li>{escape(w)} <span class=\"muted\">({len(where)} rows: "
                    f"{escape(', '.join(where[:6]))}{', ...' if len(where) > 6 else ''})"
                    f"</span></li>" for w, where in seen.items())
    return f"<section id=\"warnings\"><h2>Warnings</h2><ul>{items}</ul></section>"
