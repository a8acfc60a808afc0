"""The report as one self-contained HTML page: inline CSS and SVG only, nothing fetched, so
it opens anywhere (an attachment, a CI artifact, an air-gapped machine).

The page shows the headline figures, the placement graph (``placement_svg``), the latency
breakdown, memory against each region's capacity, and the tables: ops with the reason each
is not on the NPU, partitions with their compiler's figures, program I/O, notes, kernels and
versions. Every text is escaped; the output depends only on the report.
"""

from __future__ import annotations

from html import escape

from . import placement_svg as graph
from .advice import accuracy_warning, latency_advice
from .html_format import (card, fmt_figure, fmt_num, fmt_us,
                          html_table, kv_table, scalars)
from .html_memory import memory_regions, memory_section
from .labels import label, op_shapes, op_times, shape_text

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
 margin:0;color:#1f2937;background:#f6f7f9}
main{max-width:1320px;margin:0 auto;padding:18px 24px 48px}
h1{font-size:22px;margin:4px 0 2px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid
 #d8dce3;padding-bottom:4px}h3{font-size:14px;margin:16px 0 6px}
.sub{color:#4b5563;margin-bottom:10px}.muted{color:#6b7280}
.warn{background:#fde8e8;border:1px solid #e11d48;color:#9f1239;padding:8px 12px;border-radius:6px;
 font-weight:600;margin:10px 0}
.advice{background:#fff8e1;border:1px solid #d97706;color:#7c2d12;padding:8px 12px;
 border-radius:6px;margin:10px 0}.advice b{color:#9a3412}
.card.bad{border:2px solid #e11d48;background:#fde8e8}.card.bad .v{color:#be123c}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{background:#fff;border:1px solid #d8dce3;border-radius:8px;padding:8px 14px;min-width:150px}
.card .k{font-size:12px;color:#6b7280}.card .v{font-size:20px;font-weight:650}
.card .d{font-size:12px;color:#4b5563}
.scroll{overflow:auto;max-height:900px;background:#fff;border:1px solid #d8dce3;border-radius:8px}
.legend{display:flex;flex-wrap:wrap;gap:16px;margin:6px 0;font-size:13px;align-items:center}
.chip{display:inline-block;width:12px;height:12px;border-radius:3px;vertical-align:-1px;
 margin-right:5px}
table.ops td{white-space:nowrap}table.ops td:nth-child(10){white-space:normal;min-width:260px}
table{border-collapse:collapse;background:#fff;font-size:13px;width:100%}
th,td{border:1px solid #e1e4ea;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef0f4;position:sticky;top:0}table.kv{width:auto;min-width:420px}
td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.npu td:first-child{border-left:5px solid #2a9d5c}
tr.cortex-m td:first-child{border-left:5px solid #2f6bd1}
tr.portable td:first-child{border-left:5px solid #e07a1f}
tr:target{background:#fff7d6}
tr.lossy td{background:#fde8e8}
.bar{position:relative;height:22px;background:#eef0f4;border-radius:4px;overflow:hidden}
.bar span{position:absolute;top:0;bottom:0}
.over{color:#b91c1c;font-weight:650}.ok{color:#15803d;font-weight:650}
code{font-size:12px}.stat{display:inline-block;margin-right:14px;white-space:nowrap}
section>pre{white-space:pre-wrap;overflow-wrap:anywhere}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif}
"""

OTHER_COLOUR = "#6b7280"


def render_html(report) -> str:
    """The whole page for ``report`` (a ``Report``)."""
    s = report.summary
    body = [_header(report, s), _graph_section(report), _latency_section(report.latency, report),
            memory_section(report.memory, getattr(report, "placement", None) or {}),
            _layers_section(getattr(report, "layers", [])),
            _precision_section(report), _calibration_section(report), _ops_section(report), _partitions_section(report),
            _io_section(report.io, getattr(report, "program_io", None)),
            _state_section(getattr(report, "state", []), getattr(report, "stream", {})),
            _notes_section(report),
            _kernels_section(report.kernels),
            _versions_section(report.versions)]
    title = f"mcu-npu report: {report.target}"
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
            + "\n".join(part for part in body if part) + "\n</main>\n</body>\n</html>\n")


def _runs_on_class(text) -> str:
    """The kernel class a latency row's ``runs_on`` names (for its colour)."""
    t = str(text).lower()
    if "npu" in t or "neutron" in t or "ethos" in t:
        return "npu"
    if "portable" in t or "float" in t:
        return "portable"
    if "cortex" in t or "cpu" in t or "cmsis" in t:
        return "cortex-m"
    return "other"


def _colour(cls: str) -> str:
    return graph.KERNEL_COLOURS.get(cls, OTHER_COLOUR)


# sections ------------------------------------------------------------------------------
def _header(report, s: dict) -> str:
    out = ["<header>", "<h1>mcu-npu compile report</h1>",
           f'<div class="sub">target <b>{escape(str(report.target))}</b> \u00b7 NPU compiler '
           f'<b>{escape(str(report.npu_compiler))}</b></div>']
    for line in report.host_only_lines():
        out.append(f'<div class="warn">{escape(line)}</div>')
    cards = [card("ops on the NPU", f"{s['ops_on_npu']}/{s['ops_total']}",
                   f"{100 * s['npu_ops_fraction']:.1f}% of compute ops; {s['ops_on_cpu']} on "
                   f"the CPU ({s['ops_on_cortex_m']} Cortex-M int8)"),
             card("NPU partitions", str(s["partitions"]))]
    if s["macs"]:
        cards.append(card("MACs", f"{s['macs']:,}", f"{s['npu_macs']:,} on the NPU"))
    acc = report.accuracy or {}
    if isinstance(acc.get("sqnr_db"), (int, float)):
        ref = acc.get("reference_sqnr_db")
        cards.append(card("SQNR (against the float model)", f"{acc['sqnr_db']:.2f} dB",
                           f"quantized reference {ref:.2f} dB"
                           if isinstance(ref, (int, float)) else "program vs float model",
                           bad=bool(accuracy_warning(acc))))
    lat = report.latency or {}
    if isinstance(lat.get("latency_us"), (int, float)):
        parts = [f"{k[:-3].upper()} {lat[k]:,.1f} \u00b5s" for k in ("npu_us", "cpu_us")
                 if isinstance(lat.get(k), (int, float))]
        label = "latency (NPU part a lower bound)" if lat.get("npu_is_bound") else \
            "latency (estimate)"
        cards.append(card(label, fmt_us(lat["latency_us"]), ", ".join(parts)))
    if "int16_ops" in s:
        cards.append(card("int16 activations", f"{s['int16_ops']}/{s['ops_total']} ops",
                           "16x8 kernels; the rest int8"))
    if "npu_total_cycles" in s:
        cards.append(card("NPU cycles (total)", f"{s['npu_total_cycles']:,}",
                           f"compute only {s['npu_cycles']:,}" if "npu_cycles" in s else ""))
    for region in memory_regions(report.memory or {}):
        if region["capacity"] and region["used"]:
            fits = "fits" if region["fits"] else "DOES NOT FIT"
            cards.append(card(f"{region['name']} needs", _short(region["used"]),
                              f"of {_short(region['capacity'])} ({region['used']:,} B): {fits}",
                              bad=region["fits"] is False))
    out.append(f'<div class="cards">{"".join(cards)}</div>')
    warning = accuracy_warning(acc)
    if warning:
        out.append(f'<div class="warn">{escape(warning)}</div>')
    for line in latency_advice(report):
        out.append(f'<div class="advice"><b>What to do:</b> {escape(line)}</div>')
    others = [(k, v) for k, v in scalars(acc) if k not in ("sqnr_db", "reference_sqnr_db")]
    if others:
        out.append("<h3>accuracy</h3>" + kv_table(others))
    out.append("</header>")
    return "\n".join(out)


def _short(n) -> str:
    """Bytes in the largest unit that keeps them above 1: ``1.5 MiB``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,} B"


def _legend(items) -> str:
    return '<div class="legend">' + "".join(
        f'<span><span class="chip" style="background:{c}"></span>{escape(t)}</span>'
        for c, t in items) + "</div>"


def _graph_section(report) -> str:
    rows = (report.latency or {}).get("rows") or []
    items = [(graph.KERNEL_COLOURS[k], graph.KERNEL_LABELS[k]) for k in graph.KERNEL_COLOURS]
    items += [(graph.TRANSFER_COLOUR, "data crossing an NPU partition boundary"),
              (graph.TRANSPOSE_COLOUR, "T: boundary transpose")]
    return ("<section id=\"graph\"><h2>Placement graph</h2>"
            "<p class=\"muted\">Compute ops in execution layers (left to right, wrapping "
            "downwards); dashed outlines are NPU partitions. Click an op for its row in the "
            "table; hover for details.</p>" + _legend(items)
            + f'<div class="scroll">{graph.render(report.ops, rows)}</div></section>')


def _hbars(items, *, unit_fmt=fmt_us, label_w=270, width=1000, bar_h=16) -> str:
    """Horizontal bars: items are (label, value, colour, tooltip)."""
    if not items:
        return ""
    top = max((v for _, v, _, _ in items), default=0) or 1
    span = width - label_w - 110
    h = len(items) * (bar_h + 4) + 6
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
           f'viewBox="0 0 {width} {h}" class="bars">']
    for n, (name, value, colour, tip) in enumerate(items):
        y = 3 + n * (bar_h + 4)
        w = max(span * value / top, 1 if value else 0)
        out.append(f'<g><text x="{label_w - 6}" y="{y + bar_h - 4}" font-size="12" '
                   f'text-anchor="end">{escape(graph.clip(name, 38))}</text>'
                   f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" rx="2" '
                   f'fill="{colour}"/><text x="{label_w + w + 6:.1f}" y="{y + bar_h - 4}" '
                   f'font-size="12">{escape(unit_fmt(value))}</text>'
                   f'<title>{escape(tip)}</title></g>')
    out.append("</svg>")
    return "".join(out)


def _step_label(row: dict, report) -> str:
    """A latency step as people read it: the layer of the op it runs, else its kind and
    node (``quantize: cortex_m_quantize_per_tensor_default``)."""
    node, kind = str(row.get("node", "")), str(row.get("kind", ""))
    op = next((o for o in report.ops if o.ident and o.ident == row.get("ident")), None) \
        if report is not None else None
    if op is not None and op.layer:
        return f"{op.layer} ({kind})"
    return node if kind in ("npu", "") else f"{kind}: {node}"


def _npu_layers_html(report) -> str:
    """The slowest NPU ops, by their per-layer time (``latency["npu_ops"]``)."""
    times = (report.latency or {}).get("npu_ops") or {}
    by_node = {o.node: o for o in report.ops}
    items = [(n, t) for n, t in times.items() if isinstance(t, dict) and t.get("us")]
    if not items:
        return ""
    items.sort(key=lambda nt: -nt[1]["us"])
    peak = any("peak" in str(t.get("basis")) for _, t in items)
    title = ("NPU time per layer: MACs at the NPU's peak, a lower bound (no per-layer "
             "figure from the NPU compiler)" if peak else
             "NPU time per layer: the NPU compiler's per-layer cycles (estimate)")
    shown = items[:15]
    bars = [(f"{by_node[n].layer} ({graph.short_op(by_node[n].op)})" if n in by_node and
             by_node[n].layer else n, t["us"], _colour("npu"),
             f"{n}: {t['us']:,.2f} \u00b5s, {t['cycles']:,} cycles ({t.get('basis', '')})")
            for n, t in shown]
    more = f" (the slowest {len(shown)} of {len(items)})" if len(items) > len(shown) else ""
    return f"<h3>{escape(title)}{escape(more)}</h3>" + _hbars(bars)


def _latency_section(lat: dict, report=None) -> str:
    head = "<section id=\"latency\"><h2>Latency breakdown</h2>"
    if not lat or not isinstance(lat.get("latency_us"), (int, float)):
        return head + "<p class=\"muted\">No latency estimate in this report.</p></section>"
    rows = [r for r in lat.get("rows") or [] if isinstance(r, dict)]
    out = [head, f"<p>Estimated whole-model latency <b>{fmt_us(lat['latency_us'])}</b>"
           + "".join(f", {k[:-3].upper()} {fmt_us(lat[k])}" for k in ("npu_us", "cpu_us")
                     if isinstance(lat.get(k), (int, float))) + ".</p>"]
    if lat.get("npu_is_bound"):
        out.append('<p class="warn">The NPU figures are lower bounds (from MACs and bytes '
                   "moved), not estimates: the NPU compiler gives no cycle count.</p>")
    extra = scalars(lat, skip=("latency_us", "npu_us", "cpu_us"))
    if extra:
        out.append(kv_table(extra))
    if lat.get("not_estimated"):
        out.append(f"<p>Not estimated: {escape(fmt_num(list(lat['not_estimated'])))}</p>")
    total = sum(r.get("us") or 0 for r in rows)
    if rows and total > 0:  # timeline: the steps in execution order, as shares of the total
        spans, x = [], 0.0
        for r in rows:
            share = 100 * (r.get("us") or 0) / total
            tip = f"{r.get('node', '')} ({r.get('kind', '')}, {r.get('runs_on', '')}): " \
                  f"{fmt_us(r.get('us') or 0)}"
            spans.append(f'<span style="left:{x:.3f}%;width:{share:.3f}%;background:'
                         f'{_colour(_runs_on_class(r.get("runs_on")))}" title="{escape(tip)}">'
                         "</span>")
            x += share
        out.append("<h3>steps in execution order (share of the total)</h3>"
                   f'<div class="bar" style="height:28px">{"".join(spans)}</div>')
        out.append(_legend([(_colour(c), t) for c, t in (("npu", "NPU"), ("cortex-m", "Cortex-M"),
                                                          ("portable", "portable"),
                                                          ("other", "other CPU work"))]))
    if rows:
        kinds: dict[str, list] = {}
        for r in rows:
            k = kinds.setdefault(str(r.get("kind", "?")), [0.0, 0, {}])
            k[0] += r.get("us") or 0
            k[1] += 1
            cls = _runs_on_class(r.get("runs_on"))
            k[2][cls] = k[2].get(cls, 0) + (r.get("us") or 0)
        items = [(f"{name} (\u00d7{n})", us, graph.TRANSPOSE_COLOUR if name == "transpose"
                  else _colour(max(sorted(by), key=by.get)),
                  f"{name}: {n} step(s), {us:,.1f} \u00b5s")
                 for name, (us, n, by) in sorted(kinds.items(), key=lambda kv: (-kv[1][0], kv[0]))]
        out.append("<h3>by kind</h3>" + _hbars(items))
        if report is not None:
            out.append(_npu_layers_html(report))
        steps = [(_step_label(r, report), r.get("us") or 0,
                  _colour(_runs_on_class(r.get("runs_on"))),
                  f"{r.get('node', '')}: {r.get('op', '')}, {r.get('kind', '')} on "
                  f"{r.get('runs_on', '')}, {fmt_num(r.get('cycles'))} cycles"
                  + (f"; {r['basis']}" if r.get("basis") else "")) for r in rows]
        out.append(f"<h3>by step ({len(rows)} steps, in execution order)</h3>"
                   f'<div class="scroll" style="max-height:520px">{_hbars(steps)}</div>')
        table = [(r.get("node", ""), r.get("op", ""), r.get("runs_on", ""), r.get("kind", ""),
                  _work(r), fmt_num(r["cycles"]) if isinstance(r.get("cycles"), (int, float))
                  else "", f"{r['us']:,.2f}" if isinstance(r.get("us"), (int, float)) else "",
                  r.get("basis", "")) for r in rows]
        out.append("<details><summary>latency rows (each step's work and basis)</summary>"
                   + html_table(("step", "op", "runs on", "kind", "work", "cycles", "\u00b5s",
                             "basis"), table, numeric=(4, 5, 6)) + "</details>")
    out.append("</section>")
    return "\n".join(out)


def _work(row: dict) -> str:
    amount = row.get("work")
    if not isinstance(amount, (int, float)):
        return ""
    return f"{fmt_num(amount)} {row.get('unit', '')}".strip()


# tables ---------------------------------------------------------------------------------
def _ops_section(report) -> str:
    us = op_times(report)
    rows, attrs = [], []
    for i, o in enumerate(report.ops):
        kernel = graph.kernel_of(o)
        time = ""
        if o.node in us:
            time = ("html", f'<span title="{escape(us[o.node][1])}">{us[o.node][0]:,.2f}'
                            f"{'*' if 'peak' in us[o.node][1] else ''}</span>")
        calibrated = getattr(o, "calibration", "")
        bits = f"{o.precision} ({calibrated})" if o.precision and calibrated else o.precision
        rows.append((i, o.layer or "(forward)", o.node, o.op, o.placement, bits,
                     op_shapes(o), fmt_num(o.macs) if o.macs else "", time, o.reason,
                     ", ".join(o.inputs)))
        attrs.append(f' id="op-{i}" class="{escape(kernel)}"')
    note = ""
    if any("peak" in basis for _, basis in us.values()):
        note = ('<p class="muted">* NPU time from the op\'s MACs at the NPU\'s peak MACs per '
                "cycle: a lower bound, the NPU compiler gives no per-layer figure.</p>")
    elif us:
        note = ('<p class="muted">NPU times are the NPU compiler\'s per-layer cycles (an '
                "estimate); an op fused into the one before it shows 0.</p>")
    return ("<section id=\"ops\"><h2>Compute ops</h2>" + note
            + '<div class="scroll">'
            + html_table(("#", "layer", "node", "op", "runs on", "activations",
                      "shapes (in \u2192 out)", "MACs", "est. \u00b5s", "why not on the NPU",
                      "inputs"), rows,
                     numeric=(0, 7, 8), row_attrs=attrs, cls="ops")
            + "</div></section>")


def _precision_section(report) -> str:
    """The activation precision asked for, the ops that stay int8 and why, the auto search."""
    lines = report._precision_lines()
    if not lines:
        return ""
    return ("<section id=\"precision\"><h2>Activation precision</h2><pre>"
            + escape("\n".join(line.strip() if i == 0 else line for i, line in
                               enumerate(lines)))
            + "</pre></section>")


def _calibration_section(report) -> str:
    """The calibration method per activation tensor, and what it bought over MinMax."""
    from .calibration import calibration_lines

    lines = calibration_lines(getattr(report, "calibration", None) or {})
    if not lines:
        return ""
    return ("<section id=\"calibration\"><h2>Calibration</h2><pre>"
            + escape("\n".join(line.strip() if i == 0 else line for i, line in
                               enumerate(lines)))
            + "</pre></section>")


def _layers_section(layers) -> str:
    """The per-layer error table; a row losing more than 3 dB, or more than 1 dB behind the
    quantized reference, is marked."""
    if not layers:
        return ""

    def db(value):
        return "" if value is None else fmt_num(value) if not isinstance(value, float) \
            else ("inf" if value == float("inf") else f"{value:.2f}")

    rows, attrs = [], []
    for r in layers:
        loss, gap = r.get("loss_db"), r.get("gap_db")
        bad = (isinstance(loss, (int, float)) and loss > 3) or \
            (isinstance(gap, (int, float)) and gap > 1)
        rows.append((r.get("node", ""), r.get("op", ""), r.get("runs_on", ""),
                     r.get("source", ""), db(r.get("sqnr_db")), db(r.get("reference_sqnr_db")),
                     db(gap), db(r.get("max_error_steps")), db(loss)))
        attrs.append(' class="lossy"' if bad else "")
    return ("<section id=\"layers\"><h2>Per-layer error</h2><p>SQNR against the float "
            "model of each op's host-run value and of the quantized reference's; the op where "
            "accuracy is lost comes first (marked: more than 3 dB lost, or more than 1 dB "
            "behind the reference).</p>"
            + html_table(("node", "op", "runs on", "host value from", "SQNR dB", "reference dB",
                      "gap dB", "max error (steps)", "loss dB"), rows,
                     numeric=(4, 5, 6, 7, 8), row_attrs=attrs)
            + "</section>")


def _partitions_section(report) -> str:
    if not report.partitions:
        return ""
    us = {}
    for r in (report.latency or {}).get("rows") or []:
        where = graph.row_partition(r) if isinstance(r, dict) else None
        if where and not where[1] and isinstance(r.get("us"), (int, float)):
            us[where[0]] = us.get(where[0], 0) + r["us"]
    rows = []
    for p in report.partitions:
        counts: dict[str, int] = {}
        for t in p.tflite_ops:
            counts[t] = counts.get(t, 0) + 1
        tfl = ", ".join(f"{t}\u00d7{n}" if n > 1 else t for t, n in counts.items())
        stats = " ".join(f'<span class="stat">{escape(label(k))} <b>{escape(fmt_figure(k, v))}'
                         f'</b></span>' for k, v in p.stats.items()
                         if not isinstance(v, (dict, list)))
        rows.append((p.index, p.compiler, len(p.ops), f"{us[p.index]:,.2f}" if p.index in us
                     else "", counts.get("TRANSPOSE", 0), tfl, ("html", stats)))
    return ("<section id=\"partitions\"><h2>NPU partitions</h2>"
            + html_table(("partition", "compiler", "ops", "est. \u00b5s", "transposes inside",
                      "TFLite ops", "compiler figures"), rows, numeric=(0, 2, 3, 4))
            + "</section>")


def _io_section(io: dict, program_io: dict | None = None) -> str:
    """The program's inputs and outputs: with int8 I/O, each one's quantization too."""
    if not io:
        tensors = program_io or {}
        rows = [(f"{kind[:-1]} {i}", t.get("name", ""), shape_text(t.get("shape", ())),
                 t.get("dtype", "")) for kind in ("inputs", "outputs")
                for i, t in enumerate(tensors.get(kind, []))]
        if not rows:
            return ""
        return ("<section id=\"io\"><h2>Program I/O (float)</h2><p class=\"muted\">The "
                "program takes and returns float tensors; it quantizes its inputs and "
                "dequantizes its outputs itself.</p>"
                + html_table(("", "name", "shape", "dtype"), rows) + "</section>")
    rows = []
    for kind in ("inputs", "outputs"):
        for i, t in enumerate(io.get(kind, [])):
            rows.append((f"{kind[:-1]} {i}", t.get("name", ""), shape_text(t.get("shape", ())),
                         t.get("dtype", ""), "-" if t.get("scale") is None else
                         f"{t['scale']:.9g}", "-" if t.get("zero_point") is None else
                         str(t["zero_point"]),
                         f"[{t.get('quant_min', '')}, {t.get('quant_max', '')}]"))
    return (f"<section id=\"io\"><h2>Program I/O ({escape(str(io.get('mode', 'int8')))})</h2>"
            "<p class=\"muted\">real = scale \u00d7 (q \u2212 zero_point); "
            "q = clamp(round(real / scale) + zero_point)</p>"
            + html_table(("", "name", "shape", "dtype", "scale", "zero point", "range"), rows)
            + "</section>")


def _state_section(state: list, stream: dict) -> str:
    """The stream's per-call cost against its frame period, and the tensors the program
    keeps between calls, with their bytes and encoding."""
    from .text import stream_lines

    lines = stream_lines(stream)
    budget = f"<p>{escape(lines[0])}</p>" if lines else ""
    if not state:
        return f"<section id=\"stream\"><h2>Stream</h2>{budget}</section>" if budget else ""
    rows = [(t["name"], shape_text(t.get("shape", ())), t.get("dtype", ""),
             f"{t['bytes']:,}", "-" if t.get("scale") is None else f"{t['scale']:.9g}",
             "-" if t.get("zero_point") is None else str(t["zero_point"])) for t in state]
    total = sum(t["bytes"] for t in state)
    return ("<section id=\"state\"><h2>State kept between calls</h2>" + budget +
            "<p class=\"muted\">"
            f"{len(state)} tensor(s), {total:,} B in the planned RAM: mutable buffers the "
            "program initialises and the runtime keeps between calls; the NPU reads and "
            "writes them in the int8 encoding shown.</p>"
            + html_table(("name", "shape", "dtype", "bytes", "scale", "zero point"), rows,
                         numeric=(3,)) + "</section>")


def _notes_section(report) -> str:
    items = [f"<li>{escape(n)}</li>" for n in report.notes]
    items += [f'<li class="over">{escape(p)}</li>' for p in report.kernel_problems]
    if not items:
        return ""
    return f"<section id=\"notes\"><h2>Notes</h2><ul>{''.join(items)}</ul></section>"


def _kernels_section(kernels) -> str:
    if not kernels:
        return ""
    rows = [(k.get("op", ""), k.get("library", ""),
             "yes" if k.get("available", True) else ("html", '<span class="over">NOT PROVIDED'
                                                             "</span>")) for k in kernels]
    return ("<section id=\"kernels\"><h2>Kernels the firmware must link</h2>"
            + html_table(("op", "library", "provided on this target"), rows) + "</section>")


def _versions_section(versions) -> str:
    if not versions:
        return ""
    rows = []
    for key, value in versions.items():
        if isinstance(value, dict):
            rows += [(f"{key}: {k}", v) for k, v in value.items()]
        else:
            rows.append((key, ", ".join(map(str, value)) if isinstance(value, list) else value))
    return ("<section id=\"versions\"><h2>Versions</h2>"
            + html_table(("what", "version"), rows) + "</section>")
