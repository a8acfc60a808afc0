"""The HTML page's formatting: numbers, bytes, microseconds, cards, tables (every text
escaped unless given as ``("html", markup)``)."""

from __future__ import annotations

from html import escape

from .labels import label


def fmt_num(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(map(fmt_num, value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1e6 else f"{value:,.0f}"
    return str(value)


def fmt_bytes(n) -> str:
    if not isinstance(n, (int, float)):
        return escape(str(n))
    n = int(n)
    if abs(n) < 1024:
        return f"{n:,} B"
    unit = "KiB" if abs(n) < 1024 ** 2 else "MiB"
    scale = 1024 if unit == "KiB" else 1024 ** 2
    return f"{n:,} B ({n / scale:,.1f} {unit})"


def fmt_us(value) -> str:
    return f"{value:,.1f} \u00b5s" if isinstance(value, (int, float)) else escape(str(value))


def card(key: str, value: str, detail: str = "", bad: bool = False) -> str:
    d = f'<div class="d">{escape(detail)}</div>' if detail else ""
    return (f'<div class="card{" bad" if bad else ""}"><div class="k">{escape(key)}</div>'
            f'<div class="v">{escape(value)}</div>{d}</div>')


def html_table(header, rows, *, numeric=(), row_attrs=None, cls="") -> str:
    """An HTML table; cells are escaped text unless given as ``("html", markup)``."""
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    table = f'<table class="{cls}">' if cls else "<table>"
    out = [f"{table}<thead><tr>{head}</tr></thead><tbody>"]
    for r, row in enumerate(rows):
        attrs = row_attrs[r] if row_attrs else ""
        cells = []
        for c, cell in enumerate(row):
            text = cell[1] if isinstance(cell, tuple) and cell[:1] == ("html",) else \
                escape(str(cell))
            cls = ' class="n"' if c in numeric else ""
            cells.append(f"<td{cls}>{text}</td>")
        out.append(f"<tr{attrs}>{''.join(cells)}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def scalars(d: dict, skip=()) -> list[tuple[str, object]]:
    return [(k, v) for k, v in d.items()
            if k not in skip and isinstance(v, (int, float, str, bool))]


def fmt_figure(key, value) -> str:
    """A named figure, with its unit when the name gives it."""
    key = str(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if key.endswith("bytes") or key.endswith("_total") or key in BYTE_KEYS:
            return fmt_bytes(value)
        if key.endswith("_hz"):
            return f"{value / 1e6:g} MHz"
        if key.endswith("fmt_us"):
            return fmt_us(value)
    return fmt_num(value)


BYTE_KEYS = {"program", "constants", "npu_payloads", "npu_weights", "npu_commands",
              "tables", "named_data", "inputs", "outputs", "npu_scratch",
              "method_allocator", "peak", "fast_scratch", "planned"}
"""Keys of ``memory["flash"]`` and ``memory["ram"]`` that are byte counts."""


def kv_table(pairs) -> str:
    return html_table(("figure", "value"), [(label(k), pool_list(v) if k == "planned" and
                                         isinstance(v, list) else fmt_figure(k, v))
                                        for k, v in pairs], cls="kv")


def pool_list(pools: list) -> str:
    """ExecuTorch's planned pools (pool 0 is reserved, always empty) as text."""
    shown = [f"pool {i}: {fmt_bytes(b)}" for i, b in enumerate(pools) if i or b]
    return "; ".join(shown) or "none"
