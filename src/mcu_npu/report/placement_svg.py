"""The placement graph as inline SVG: compute ops as boxes coloured by what runs them, edges
from ``OpPlacement.inputs``, NPU partitions outlined, data crossing a partition boundary and
boundary transposes marked.

Layout: ops in topological layers left to right; the layers wrap into bands of ``PER_BAND``
so a graph of a few hundred ops stays a readable page instead of one very wide strip. Every
box links to its row of the op table and carries the op's details as a tooltip.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from html import escape

KERNEL_COLOURS = {"npu": "#2a9d5c", "cortex-m": "#2f6bd1", "portable": "#e07a1f"}
KERNEL_LABELS = {"npu": "NPU", "cortex-m": "Cortex-M int8", "portable": "portable"}
TRANSFER_COLOUR = "#d62839"
TRANSPOSE_COLOUR = "#8e44ad"
PARTITION_COLOURS = ("#14532d", "#7c2d12", "#1e3a8a", "#713f12", "#581c87", "#134e4a")

PER_BAND = 6
BOX_W, BOX_H = 150, 38
GAP_X, GAP_Y, BAND_GAP, PAD = 46, 14, 46, 18


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    band: int


def kernel_of(op) -> str:
    """The kernel's JSON value ("npu", "cortex-m", "portable")."""
    return str(getattr(op.kernel, "value", op.kernel))


def group_of(op) -> str:
    """What the op runs inside: its NPU partition, or "cpu". Data moving between two groups
    crosses an NPU boundary."""
    return op.placement if kernel_of(op) == "npu" else "cpu"


def partition_number(op) -> int | None:
    """k of ``NPU partition k``; None for an op the CPU runs."""
    if kernel_of(op) != "npu":
        return None
    tail = op.placement.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else None


def short_op(name: str) -> str:
    """``aten.convolution`` -> ``convolution`` (the box's title)."""
    return name.split(".", 1)[1] if name.startswith(("aten.", "cortex_m.")) else name


def clip(text: str, n: int) -> str:
    """``text`` cut to ``n`` characters in the middle, so a name's numbered tail stays."""
    if len(text) <= n:
        return text
    tail = (n - 1) // 2
    return text[:n - 1 - tail] + "\u2026" + text[len(text) - tail:]


def layers(ops) -> list[int]:
    """Each op's topological layer (longest path from a graph input), in report order;
    ties in the topological order keep the report's order, so the layout is deterministic."""
    index = {o.node: i for i, o in enumerate(ops)}
    preds = [sorted({index[n] for n in o.inputs if n in index and index[n] != i})
             for i, o in enumerate(ops)]
    users = [[] for _ in ops]
    for i, ps in enumerate(preds):
        for p in ps:
            users[p].append(i)
    waiting = [len(ps) for ps in preds]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    layer = [0] * len(ops)
    done = set()
    while len(done) < len(ops):
        if not ready:  # a cycle (not expected): take the first op left
            heapq.heappush(ready, min(i for i in range(len(ops)) if i not in done))
        i = heapq.heappop(ready)
        if i in done:
            continue
        done.add(i)
        layer[i] = 1 + max((layer[p] for p in preds[i] if p in done), default=-1)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    return layer


def lay_out(ops) -> tuple[list[Box], float, float]:
    """(one Box per op, width, height): layers left to right, wrapped into bands."""
    layer = layers(ops)
    index = {o.node: i for i, o in enumerate(ops)}
    by_layer: dict[int, list[int]] = {}
    for i, l in enumerate(layer):
        by_layer.setdefault(l, []).append(i)
    rank: dict[int, float] = {}
    for l in sorted(by_layer):  # order each layer by its inputs' mean rank (fewer crossings)
        def key(i):
            ins = [rank[index[n]] for n in ops[i].inputs if n in index and index[n] in rank]
            return (sum(ins) / len(ins) if ins else float("inf"), i)
        by_layer[l].sort(key=key)
        for r, i in enumerate(by_layer[l]):
            rank[i] = r
    boxes: list[Box | None] = [None] * len(ops)
    n_layers = max(layer, default=-1) + 1
    y = PAD + 16
    for band in range(0, n_layers, PER_BAND):
        tallest = max(len(by_layer.get(l, ())) for l in range(band, band + PER_BAND))
        for l in range(band, min(band + PER_BAND, n_layers)):
            x = PAD + (l - band) * (BOX_W + GAP_X)
            for r, i in enumerate(by_layer.get(l, ())):
                boxes[i] = Box(x, y + r * (BOX_H + GAP_Y), band // PER_BAND)
        y += tallest * (BOX_H + GAP_Y) - GAP_Y + BAND_GAP
    width = 2 * PAD + min(PER_BAND, max(n_layers, 1)) * (BOX_W + GAP_X) - GAP_X
    return boxes, width, y - BAND_GAP + PAD


def _edge_path(a: Box, b: Box) -> tuple[str, float, float]:
    """(SVG path, midpoint x, y) from box a to box b."""
    if a.band == b.band:  # layers grow left to right within a band
        x0, y0, x1, y1 = a.x + BOX_W, a.y + BOX_H / 2, b.x, b.y + BOX_H / 2
        dx = max((x1 - x0) / 2, 20)
        path = (f"M{x0:.1f},{y0:.1f} C{x0 + dx:.1f},{y0:.1f} {x1 - dx:.1f},{y1:.1f} "
                f"{x1:.1f},{y1:.1f}")
    else:  # into a later band: leave at the bottom, enter at the top
        x0, y0, x1, y1 = a.x + BOX_W / 2, a.y + BOX_H, b.x + BOX_W / 2, b.y
        dy = max((y1 - y0) / 2, 20)
        path = (f"M{x0:.1f},{y0:.1f} C{x0:.1f},{y0 + dy:.1f} {x1:.1f},{y1 - dy:.1f} "
                f"{x1:.1f},{y1:.1f}")
    return path, (x0 + x1) / 2, (y0 + y1) / 2


_DELEGATE_ROW = re.compile(r"npu partition (\d+)(?: (input|output) (\d+))?$", re.I)


def row_partition(row: dict) -> tuple[int, str, int] | None:
    """(k, "input"/"output"/"", index) of a latency row about NPU partition k's call
    (``npu partition k``) or the runtime's work on its I/O (``npu partition k input i``)."""
    m = _DELEGATE_ROW.match(str(row.get("node", "")))
    if m is None:
        return None
    return int(m.group(1)), (m.group(2) or "").lower(), int(m.group(3) or 0)


def transpose_marks(ops, rows) -> tuple[dict[tuple[int, int], list[dict]], dict[int, list[dict]]]:
    """Where each transpose the latency rows list (kind "transpose") is drawn. Returns (edge
    marks, box marks):

    - a transpose that is a compute op: on its box;
    - one the runtime does on partition k's input or output: on the partition's first op
      fed from outside it, or its last op feeding outside it;
    - any other: on the edge joining the compute ops executed just before and just after
      it, else on the op it feeds (or follows, at the graph's end).
    """
    index = {o.node: i for i, o in enumerate(ops)}
    members: dict[int, list[int]] = {}
    for i, o in enumerate(ops):
        k = partition_number(o)
        if k is not None:
            members.setdefault(k, []).append(i)

    def ops_of(row) -> list[int]:
        if row.get("node") in index and row.get("kind") != "transpose":
            return [index[row["node"]]]
        where = row_partition(row)
        return members.get(where[0], []) if where and not where[1] else []

    edge_marks: dict[tuple[int, int], list[dict]] = {}
    box_marks: dict[int, list[dict]] = {}
    for n, row in enumerate(rows):
        if row.get("kind") != "transpose":
            continue
        where = row_partition(row)
        if row.get("node") in index:
            box_marks.setdefault(index[row["node"]], []).append(row)
        elif where and where[1] and where[0] in members:
            box_marks.setdefault(_boundary_op(ops, index, members[where[0]], where[1]),
                                 []).append(row)
        else:
            before = next((ops_of(r) for r in reversed(rows[:n]) if ops_of(r)), [])
            after = next((ops_of(r) for r in rows[n + 1:] if ops_of(r)), [])
            joined = [(p, u) for u in after for p in (index.get(i) for i in ops[u].inputs)
                      if p in before]
            if joined:
                edge_marks.setdefault(min(joined), []).append(row)
            elif after or before:
                box_marks.setdefault(min(after) if after else max(before), []).append(row)
    return edge_marks, box_marks


def _boundary_op(ops, index, members: list[int], direction: str) -> int:
    """The partition's first op fed from outside it ("input"), or its last op feeding
    outside it ("output")."""
    inside = set(members)
    if direction == "input":
        fed = [i for i in members
               if not ops[i].inputs or any(index.get(n) not in inside for n in ops[i].inputs)]
        return fed[0] if fed else members[0]
    feeding = {index[n] for o_i, o in enumerate(ops) if o_i not in inside
               for n in o.inputs if index.get(n) in inside}
    used = {index[n] for o in ops for n in o.inputs if n in index}
    out = [i for i in members if i in feeding or i not in used]
    return out[-1] if out else members[-1]


def _tooltip(op) -> str:
    lines = [f"{op.layer}  ({op.node})" if getattr(op, "layer", "") else op.node,
             f"{op.op} \u2014 {op.placement}"]
    if getattr(op, "output_shape", ()):
        ins = ", ".join("x".join(map(str, s)) for s in op.input_shapes)
        lines.append(f"{ins} \u2192 {'x'.join(map(str, op.output_shape))}")
    if op.macs:
        lines.append(f"{op.macs:,} MACs")
    if op.reason:
        lines.append(f"not on the NPU: {op.reason}")
    return "\n".join(lines)


def render(ops, latency_rows=()) -> str:
    """The placement graph of ``ops`` (``report.ops``) as one ``<svg>`` element."""
    if not ops:
        return '<p class="muted">No compute ops in the report.</p>'
    boxes, width, height = lay_out(ops)
    index = {o.node: i for i, o in enumerate(ops)}
    edge_marks, box_marks = transpose_marks(ops, [r for r in latency_rows if isinstance(r, dict)])
    out = [f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
           f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
           f'aria-label="placement graph">',
           '<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" '
           'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" '
           'fill="#667"/></marker><marker id="arrow-x" viewBox="0 0 8 8" refX="7" refY="4" '
           f'markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path '
           f'd="M0,0 L8,4 L0,8 z" fill="{TRANSFER_COLOUR}"/></marker></defs>']
    out += _partition_outlines(ops, boxes)
    marks = []
    for i, op in enumerate(ops):
        for name in dict.fromkeys(op.inputs):
            if name not in index or index[name] == i:
                continue
            p = index[name]
            path, mx, my = _edge_path(boxes[p], boxes[i])
            crossing = group_of(ops[p]) != group_of(op)
            if crossing:
                tip = (f"data transfer: {ops[p].node} ({ops[p].placement}) \u2192 {op.node} "
                       f"({op.placement})")
                out.append(f'<path class="edge transfer" d="{path}" fill="none" '
                           f'stroke="{TRANSFER_COLOUR}" stroke-width="2" '
                           f'marker-end="url(#arrow-x)"><title>{escape(tip)}</title></path>')
                marks.append(f'<circle cx="{mx:.1f}" cy="{my:.1f}" r="4" fill="#fff" '
                             f'stroke="{TRANSFER_COLOUR}" stroke-width="2"><title>{escape(tip)}'
                             f'</title></circle>')
            else:
                out.append(f'<path class="edge" d="{path}" fill="none" stroke="#889" '
                           f'stroke-width="1.2" marker-end="url(#arrow)"/>')
            for row in edge_marks.get((p, i), ()):
                marks.append(_transpose_badge(mx + 8, my - 8, row))
    out += marks
    for i, op in enumerate(ops):
        out.append(_box(op, boxes[i], i, box_marks.get(i, ())))
    out.append("</svg>")
    return "\n".join(out)


def _transpose_badge(x: float, y: float, row: dict) -> str:
    tip = f"transpose: {row.get('node', '')} ({row.get('op', '')})"
    if isinstance(row.get("us"), (int, float)):
        tip += f", {row['us']:,.1f} \u00b5s on {row.get('runs_on', 'the CPU')}"
    return (f'<g class="transpose"><rect x="{x - 7:.1f}" y="{y - 7:.1f}" width="14" height="14" '
            f'rx="2" fill="{TRANSPOSE_COLOUR}" transform="rotate(45 {x:.1f} {y:.1f})"/>'
            f'<text x="{x:.1f}" y="{y + 3.5:.1f}" text-anchor="middle" font-size="10" '
            f'fill="#fff" font-weight="bold">T</text><title>{escape(tip)}</title></g>')


def _box(op, box: Box, i: int, transposes) -> str:
    kernel = kernel_of(op)
    colour = KERNEL_COLOURS.get(kernel, "#777")
    k = partition_number(op)
    stroke = PARTITION_COLOURS[k % len(PARTITION_COLOURS)] if k is not None else "#1f2937"
    label = clip(short_op(op.op), 20) + (f"  P{k}" if k is not None else "")
    parts = [f'<a href="#op-{i}" class="op {escape(kernel)}"><g>',
             f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="5" '
             f'fill="{colour}" stroke="{stroke}" stroke-width="{2 if k is not None else 1}"/>',
             f'<text x="{box.x + 7:.1f}" y="{box.y + 15:.1f}" font-size="12" font-weight="600" '
             f'fill="#fff">{escape(label)}</text>',
             f'<text x="{box.x + 7:.1f}" y="{box.y + 30:.1f}" font-size="10" fill="#eef">'
             f'{escape(clip(getattr(op, "layer", "") or op.node, 26))}</text>',
             f'<title>{escape(_tooltip(op))}</title></g></a>']
    for n, row in enumerate(transposes):
        parts.append(_transpose_badge(box.x + BOX_W - 4 - 16 * n, box.y + 2, row))
    return "".join(parts)


def _partition_outlines(ops, boxes) -> list[str]:
    """One dashed outline per NPU partition, labelled with it: around all its ops when that
    encloses no other group's op (a partition spanning bands spans them whole), else one
    outline per band it spans, labelled once."""
    members: dict[int, list[int]] = {}
    for i, op in enumerate(ops):
        k = partition_number(op)
        if k is not None:
            members.setdefault(k, []).append(i)
    out = []
    for k, idx in sorted(members.items()):
        groups = [idx]
        if _enclosed_others(boxes, idx):
            by_band: dict[int, list[int]] = {}
            for i in idx:
                by_band.setdefault(boxes[i].band, []).append(i)
            groups = [g for _, g in sorted(by_band.items()) if not _enclosed_others(boxes, g)]
        colour = PARTITION_COLOURS[k % len(PARTITION_COLOURS)]
        for n, group in enumerate(groups):
            x0, y0, x1, y1 = _bounds(boxes, group)
            label = f"NPU partition {k} ({len(idx)} ops)" if n == 0 else ""
            out.append(f'<g class="partition"><rect x="{x0:.1f}" y="{y0:.1f}" '
                       f'width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" rx="9" fill="{colour}" '
                       f'fill-opacity="0.06" stroke="{colour}" stroke-width="1.6" '
                       f'stroke-dasharray="6 3"/>'
                       + (f'<text x="{x0 + 4:.1f}" y="{y0 - 4:.1f}" font-size="11" '
                          f'fill="{colour}" font-weight="600">{escape(label)}</text>'
                          if label else "") + "</g>")
    return out


def _bounds(boxes, members) -> tuple[float, float, float, float]:
    return (min(boxes[i].x for i in members) - 7, min(boxes[i].y for i in members) - 7,
            max(boxes[i].x for i in members) + BOX_W + 7,
            max(boxes[i].y for i in members) + BOX_H + 7)


def _enclosed_others(boxes, members) -> bool:
    """Whether the outline around ``members`` would take in another op's box."""
    x0, y0, x1, y1 = _bounds(boxes, members)
    inside = set(members)
    return any(j not in inside and x0 < b.x + BOX_W and b.x < x1 and y0 < b.y + BOX_H
               and b.y < y1 for j, b in enumerate(boxes))
