"""A grid's rows as a text table, side by side: what was asked, whether it fits, the latency
estimate and the NPU's share of it, what runs on the NPU, flash and RAM, accuracy against
the float model, where the program was placed, then the rows' ``extra`` figures; a failed
cell shows its error. Columns whose value is the same on every row (one model, one
precision) move into the heading; the flow gets a column when there are several."""

from __future__ import annotations

from typing import Sequence

from .cells import OURS, Row

ASKED = (("model", "model"), ("target", "target"), ("precision", "precision"),
         ("memory", "memory"), ("flow", "flow"))
"""(field, heading) of what a row was asked for."""

FIGURES: tuple[tuple[str, object], ...] = (
    ("fits", lambda r: "-" if r.fits is None else ("yes" if r.fits else "NO")),
    ("latency us", lambda r: (">=" if r.latency_is_bound else "")
     + _num(r.latency_us, "{:,.1f}")),
    ("NPU time", lambda r: _num(r.npu_share, "{:.0%}")),
    ("ops on NPU", lambda r: "-" if r.ops_on_npu is None else
     f"{r.ops_on_npu}/{r.ops_total}"),
    ("parts", lambda r: _num(r.partitions, "{}")),
    ("NPU compiler", lambda r: r.npu_compiler or "-"),
    ("placed in", lambda r: r.memory_placement or "-"),
    ("flash KiB", lambda r: _num(r.flash_bytes, "{:,.1f}", 1 / 1024)),
    ("RAM KiB", lambda r: _num(r.ram_bytes, "{:,.1f}", 1 / 1024)),
    ("scratch KiB", lambda r: _num(r.scratch_bytes, "{:,.1f}", 1 / 1024)),
    ("SQNR dB", lambda r: _num(r.sqnr_db, "{:.2f}")),
    ("ref dB", lambda r: _num(r.reference_sqnr_db, "{:.2f}")),
    ("top-1", lambda r: "-" if r.top1_agreement is None else
     f"{r.top1_agreement:.0%} of {r.top1_samples}"),
    ("int16 ops", lambda r: "-" if r.int16_ops is None else str(r.int16_ops)),
    ("state B", lambda r: _num(r.state_bytes, "{:,}")),
    ("rt margin us", lambda r: _num(r.realtime_margin_us, "{:,.1f}")),
)
"""(heading, cell text of a compiled row)."""

NUMERIC = {"latency us", "NPU time", "ops on NPU", "parts", "flash KiB", "RAM KiB",
           "scratch KiB", "SQNR dB",
           "ref dB", "int16 ops", "state B", "rt margin us"}

OPTIONAL = {"int16 ops": "int16_ops", "state B": "state_bytes",
            "rt margin us": "realtime_margin_us"}
"""Columns shown only when some row has a value: mixed precision, a stream's state and
real-time margin."""

SHOWN_WHEN = {"scratch KiB": lambda r: r.fits is False and bool(r.scratch_bytes)}
"""Columns shown only when some row needs them: the NPU's scratch (part of the RAM) where a
program does not fit, to tell its working memory from its buffers."""


def _num(value, fmt: str, scale: float = 1) -> str:
    return "-" if value is None else fmt.format(value * scale)


def varying(rows: Sequence[Row]) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """(the asked-for columns that differ between rows, {field: value} of those that do
    not); the target always gets a column, the flow a column or a heading unless it is
    ``mcu_npu.compile`` alone."""
    shown, fixed = [], {}
    for key, head in ASKED:
        values = {getattr(r, key) for r in rows}
        if key == "target" or len(values) > 1:
            shown.append((key, head))
        elif values and not (key == "flow" and values == {OURS}):
            fixed[key] = values.pop()
    return shown, fixed


BOUND_NOTE = (">= latency: the NPU part is a lower bound (MACs at the NPU's peak; its compiler "
              "gives no cycle count)")


def extra_columns(rows: Sequence[Row]) -> tuple[list[str], set[str]]:
    """(the names of the rows' ``extra`` figures, in the order they first come; those whose
    values are all numbers, right-aligned)."""
    names = list(dict.fromkeys(k for r in rows for k in r.extra))
    return names, {k for k in names if all(_is_number(r.extra.get(k)) or k not in r.extra
                                           for r in rows)}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def numeric_heads(rows: Sequence[Row]) -> set[str]:
    """The headings of right-aligned columns: the figures' and the numeric extra ones."""
    return NUMERIC | extra_columns(rows)[1]


def _extra_text(value) -> str:
    """An extra figure as a cell: integers with thousands separators, other numbers to four
    digits, anything else as text; "-" where the row has none."""
    if value is None:
        return "-"
    if not _is_number(value):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,.4g}"


def table_cells(rows: Sequence[Row]) -> tuple[dict[str, str], list[str], list[list[str]]]:
    """({field: value} the same on every row, the headings, each row's cell texts). A failed
    row has the asked-for cells and then one: ``error: ...``."""
    asked, fixed = varying(rows)
    figures = [(h, f) for h, f in FIGURES
               if (h not in OPTIONAL or any(getattr(r, OPTIONAL[h]) is not None for r in rows))
               and (h not in SHOWN_WHEN or any(r.ok and SHOWN_WHEN[h](r) for r in rows))]
    extra = extra_columns(rows)[0]
    figures += [(k, lambda r, k=k: _extra_text(r.extra.get(k))) for k in extra]
    head = [h for _, h in asked] + [h for h, _ in figures]
    body = []
    for r in rows:
        cells = [str(getattr(r, k)) for k, _ in asked]
        if r.ok:
            cells += [fn(r) for _, fn in figures]
        else:
            cells.append(f"error: {r.error}")
        body.append(cells)
    return fixed, head, body


def format_table(rows: Sequence[Row], front: Sequence[Row] = ()) -> str:
    """The rows as aligned text; a Pareto-front row is marked ``*``."""
    if not rows:
        return "(no cells)"
    fixed, head, body = table_cells(rows)
    numeric = numeric_heads(rows)
    n = head.index(FIGURES[0][0])  # the asked-for columns come before the first figure
    full = [cells for cells in body if len(cells) == len(head)]
    widths = [max([len(head[c])] + [len(cells[c]) for cells in (full if c >= n else body)])
              for c in range(len(head))]
    lines = [", ".join(f"{k} {v}" for k, v in fixed.items())] if fixed else []
    lines.append("  " + _join(head, widths, head, numeric))
    for r, cells in zip(rows, body):
        mark = "*" if any(r is f for f in front) else " "
        if len(cells) == len(head):
            lines.append(f"{mark} " + _join(cells, widths, head, numeric))
        else:  # an error: the asked-for columns, then the message
            lines.append(f"{mark} " + _join(cells[:n], widths, head, numeric, strip=False)
                         + "  " + cells[n])
    return "\n".join(lines)


def _join(cells, widths, head, numeric, strip: bool = True) -> str:
    text = "  ".join(c.rjust(w) if h in numeric else c.ljust(w)
                     for c, w, h in zip(cells, widths, head))
    return text.rstrip() if strip else text
