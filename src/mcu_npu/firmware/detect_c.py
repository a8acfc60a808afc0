"""Detector post-processing in C for firmware: ``mcu_npu_detect.h`` (the parameters as
``#define``s, the types, the function) and ``mcu_npu_detect.c``, computing on the board
exactly what ``mcu_npu.detect`` computes on the host (its docstring gives the rules).

C99, no heap and no libm: the caller passes the work area (``mcu_npu_detect_work_t``,
``MCU_NPU_DETECT_MAX_CANDIDATES`` candidates) and an array of
``MCU_NPU_DETECT_MAX_BOXES`` detections::

    static mcu_npu_detect_work_t work;
    mcu_npu_detection_t dets[MCU_NPU_DETECT_MAX_BOXES];
    const int8_t *outs[MCU_NPU_DETECT_NUM_OUTPUTS] = {out0};   // the program's outputs
    int n = mcu_npu_detect(outs, &work, dets);

``outputs`` are the program's raw output buffers: for a program that split a mixed-range
output into parts (boxes and scores each in their own scale), the parts; the header says
where each box coordinate, the objectness and the class scores are in them
(``BOX<c>_OUTPUT`` / ``_OFFSET`` / ``_ANCHOR_STRIDE``, ``OBJ_*``, ``CLS_*``).

On int8 outputs everything is integer (int32, int64 for areas and the IoU test): boxes in
half steps of the box scale, or of a common unit when the coordinates come from parts of
different scales (each part's values times ``BOX<c>_MULT``; ``MCU_NPU_DETECT_BOX_UNIT``),
scores as integers (``MCU_NPU_DETECT_SCORE_UNIT`` each). On float outputs the arithmetic
is float32, each product rounded as on the host: the source turns floating-point contraction (fused
multiply-add) off for GCC and clang whatever the build's ``-ffp-contract``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..detect import DEFAULT_MAX_CANDIDATES, IOU_DEN, Plan, plan
from ..errors import ConfigError
from .files import write_all

PREFIX = "MCU_NPU_DETECT"
HEADER = "mcu_npu_detect.h"
SOURCE = "mcu_npu_detect.c"


def _float(x: float) -> str:
    return f"{float(x)!r}f" if any(c in repr(float(x)) for c in ".e") else f"{float(x)!r}.0f"


def _f32(x: float) -> str:
    """The float32 nearest ``x`` as a hex literal: the very value the host compares with
    (a decimal literal rounded by the C compiler could differ in the last bit)."""
    return f"{float(np.float32(x)).hex()}f /* {float(x)!r} */"


def header_text(p: Plan) -> str:
    """``mcu_npu_detect.h`` for the resolved ``plan`` ``p``."""
    lay = p.layout
    integer = p.integer
    elem, value = ("int8_t", "int32_t") if integer else ("float", "float")
    d = [
        ("NUM_OUTPUTS", p.num_outputs, "outputs of the program (the array passed in)"),
        ("ANCHORS", p.anchors, None),
        ("CLASSES", lay.classes, None),
        ("MAX_BOXES", p.max_boxes, "detections returned, at most"),
        ("MAX_CANDIDATES", p.max_candidates, "candidates over the threshold kept for NMS"),
        ("INT8", int(integer), "1: int8 outputs, integer-only; 0: float32 outputs"),
        ("XYWH", int(lay.boxes == "xywh"), "1: boxes are centre x, y, width, height; "
                                           "0: corners"),
        ("OBJECTNESS", int(lay.objectness), "1: score = objectness * class score"),
        ("CLASS_AGNOSTIC", int(p.class_agnostic), "1: NMS across classes"),
    ]
    names = ("x", "y", "w", "h") if lay.boxes == "xywh" else ("x1", "y1", "x2", "y2")
    for c, part in enumerate(p.boxes):
        d += [(f"BOX{c}_OUTPUT", part.output, f"box coordinate {c} ({names[c]})"),
              (f"BOX{c}_OFFSET", part.offset, "element of anchor 0" if c == 0 else None),
              (f"BOX{c}_ANCHOR_STRIDE", part.anchor, None)]
    obj = p.objectness if p.objectness is not None else p.scores
    d += [("OBJ_OUTPUT", obj.output, "objectness (unused without OBJECTNESS)"),
          ("OBJ_OFFSET", obj.offset, None),
          ("OBJ_ANCHOR_STRIDE", obj.anchor, None),
          ("CLS_OUTPUT", p.scores.output, "class scores"),
          ("CLS_OFFSET", p.scores.offset, "element of class 0, anchor 0"),
          ("CLS_CHANNEL_STRIDE", p.scores.channel, None),
          ("CLS_ANCHOR_STRIDE", p.scores.anchor, None)]
    lines = [
        "/* Detector post-processing written by mcu-npu: score threshold, top-k and",
        " * class-wise NMS on the program's outputs, as mcu_npu.detect does on the host.",
        " * Compile mcu_npu_detect.c with it. No heap: pass the work area and the output",
        " * array. */",
        f"#ifndef {PREFIX}_H_",
        f"#define {PREFIX}_H_",
        "",
        "#include <stdint.h>",
        "",
    ]
    for name, val, note in d:
        lines.append(f"#define {PREFIX}_{name} {val}" + (f"  /* {note} */" if note else ""))
    if integer:
        for c, part in enumerate(p.boxes):
            lines += [f"#define {PREFIX}_BOX{c}_ZERO_POINT ({part.zero_point})",
                      f"#define {PREFIX}_BOX{c}_MULT ({part.multiplier})"]
        lines += [
            f"#define {PREFIX}_OBJ_ZERO_POINT ({obj.zero_point})",
            f"#define {PREFIX}_CLS_ZERO_POINT ({p.scores.zero_point})",
            f"/* a candidate's integer score is greater than this: floor({p.score_float!r} / "
            f"{p.score_unit!r}) */",
            f"#define {PREFIX}_SCORE_THRESHOLD ({p.threshold}L)",
            f"/* suppressed when inter * IOU_DEN > IOU_NUM * union (IoU > {p.iou!r}) */",
            f"#define {PREFIX}_IOU_NUM {p.iou_num}LL",
            f"#define {PREFIX}_IOU_DEN {IOU_DEN}LL",
            "/* what one integer step is, to convert results to float if wanted */",
            f"#define {PREFIX}_BOX_UNIT {_float(p.box_unit)}",
            f"#define {PREFIX}_SCORE_UNIT {_float(p.score_unit)}",
        ]
    else:
        lines += [
            f"#define {PREFIX}_SCORE_THRESHOLD {_f32(p.threshold)}",
            f"#define {PREFIX}_IOU {_f32(p.iou)}",
        ]
    lines += [
        "",
        f"typedef {elem} mcu_npu_detect_elem_t;    /* an output element */",
        f"typedef {value} mcu_npu_detect_value_t;  /* a box coordinate or a score */",
        f"typedef {'int64_t' if integer else 'float'} mcu_npu_detect_area_t;  "
        "/* an area, intersection or union */",
        "",
        "/* one detection: corners x1, y1, x2, y2" +
        (" in steps of BOX_UNIT (times it: the output's units)"
         if integer else " in the output's units") + " */",
        "typedef struct {",
        "    mcu_npu_detect_value_t x1, y1, x2, y2;",
        "    mcu_npu_detect_value_t score;",
        "    uint32_t anchor;",
        "    uint16_t cls;",
        "} mcu_npu_detection_t;",
        "",
        "typedef struct {",
        "    mcu_npu_detect_value_t score;",
        "    uint32_t anchor;",
        "    uint16_t cls;",
        "} mcu_npu_detect_candidate_t;",
        "",
        "/* the work area: static or on the stack, as the firmware prefers */",
        "typedef struct {",
        f"    mcu_npu_detect_candidate_t cand[{PREFIX}_MAX_CANDIDATES];",
        "} mcu_npu_detect_work_t;",
        "",
        "/* Detections, best first, into dets; returns how many (at most MAX_BOXES).",
        " * outputs[k] is the data of the program's output k. */",
        "int mcu_npu_detect(const mcu_npu_detect_elem_t *const outputs[" + PREFIX +
        "_NUM_OUTPUTS],",
        "                   mcu_npu_detect_work_t *work,",
        f"                   mcu_npu_detection_t dets[{PREFIX}_MAX_BOXES]);",
        "",
        f"#endif /* {PREFIX}_H_ */",
        "",
    ]
    return "\n".join(lines)


SOURCE_TEXT = r"""/* Detector post-processing written by mcu-npu (see mcu_npu_detect.h). */
#include "mcu_npu_detect.h"

/* no fused multiply-add: the float path computes what the host computes, rounding each
 * product, whatever -ffp-contract the firmware is built with */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

typedef mcu_npu_detect_value_t value_t;
typedef mcu_npu_detect_area_t area_t;
typedef mcu_npu_detect_candidate_t cand_t;

/* element of channel X (BOX0..BOX3, OBJ) at anchor a */
#define AT(X, a) (outputs[MCU_NPU_DETECT_##X##_OUTPUT][MCU_NPU_DETECT_##X##_OFFSET + \
                  (uint32_t)MCU_NPU_DETECT_##X##_ANCHOR_STRIDE * (a)])
#if MCU_NPU_DETECT_INT8
#define VALUE(X, a) ((int32_t)AT(X, a) - MCU_NPU_DETECT_##X##_ZERO_POINT)
#define BOX_VALUE(c, a) (VALUE(BOX##c, a) * MCU_NPU_DETECT_BOX##c##_MULT)
#define CLS_VALUE(p) ((int32_t)(p) - MCU_NPU_DETECT_CLS_ZERO_POINT)
#define ZERO 0
#else
#define VALUE(X, a) (AT(X, a))
#define BOX_VALUE(c, a) (VALUE(BOX##c, a))
#define CLS_VALUE(p) (p)
#define ZERO 0.0f
#endif

#define CLS_AT(s, c) ((s)[(uint32_t)(c) * MCU_NPU_DETECT_CLS_CHANNEL_STRIDE])

static value_t min_v(value_t a, value_t b) { return a < b ? a : b; }
static value_t max_v(value_t a, value_t b) { return a > b ? a : b; }
static area_t max_a(area_t a, area_t b) { return a > b ? a : b; }

/* a ranks below b: lower score, or the same score and a later anchor */
static int worse(const cand_t *a, const cand_t *b)
{
    return a->score < b->score || (a->score == b->score && a->anchor > b->anchor);
}

/* restore the heap (worst at the root) below node i of the first n */
static void sift_down(cand_t *h, uint32_t i, uint32_t n)
{
    for (;;) {
        uint32_t l = 2u * i + 1u, r = l + 1u, m = i;
        if (l < n && worse(&h[l], &h[m])) m = l;
        if (r < n && worse(&h[r], &h[m])) m = r;
        if (m == i) return;
        cand_t t = h[i]; h[i] = h[m]; h[m] = t;
        i = m;
    }
}

static void sift_up(cand_t *h, uint32_t i)
{
    while (i > 0u) {
        uint32_t p = (i - 1u) / 2u;
        if (!worse(&h[i], &h[p])) return;
        cand_t t = h[i]; h[i] = h[p]; h[p] = t;
        i = p;
    }
}

static void decode(const mcu_npu_detect_elem_t *const outputs[MCU_NPU_DETECT_NUM_OUTPUTS],
                   uint32_t a, value_t box[4])
{
    value_t v0 = BOX_VALUE(0, a), v1 = BOX_VALUE(1, a);
    value_t v2 = BOX_VALUE(2, a), v3 = BOX_VALUE(3, a);
#if MCU_NPU_DETECT_INT8
#if MCU_NPU_DETECT_XYWH
    box[0] = 2 * v0 - v2; box[1] = 2 * v1 - v3; box[2] = 2 * v0 + v2; box[3] = 2 * v1 + v3;
#else
    box[0] = 2 * v0; box[1] = 2 * v1; box[2] = 2 * v2; box[3] = 2 * v3;
#endif
#else
#if MCU_NPU_DETECT_XYWH
    value_t hw = v2 * 0.5f, hh = v3 * 0.5f;
    box[0] = v0 - hw; box[1] = v1 - hh; box[2] = v0 + hw; box[3] = v1 + hh;
#else
    box[0] = v0; box[1] = v1; box[2] = v2; box[3] = v3;
#endif
#endif
}

static area_t area(value_t x1, value_t y1, value_t x2, value_t y2)
{
    area_t w = (area_t)x2 - (area_t)x1, h = (area_t)y2 - (area_t)y1;
    return max_a(w, ZERO) * max_a(h, ZERO);
}

/* IoU of box and det greater than the threshold */
static int overlaps(const value_t box[4], area_t box_area, const mcu_npu_detection_t *d)
{
    area_t iw = (area_t)min_v(d->x2, box[2]) - (area_t)max_v(d->x1, box[0]);
    area_t ih = (area_t)min_v(d->y2, box[3]) - (area_t)max_v(d->y1, box[1]);
    if (!(iw > ZERO) || !(ih > ZERO)) return 0;
    area_t inter = iw * ih;
    area_t uni = box_area + area(d->x1, d->y1, d->x2, d->y2);
    uni = uni - inter;
#if MCU_NPU_DETECT_INT8
    return inter * MCU_NPU_DETECT_IOU_DEN > MCU_NPU_DETECT_IOU_NUM * uni;
#else
    area_t limit = MCU_NPU_DETECT_IOU * uni;
    return inter > limit;
#endif
}

int mcu_npu_detect(const mcu_npu_detect_elem_t *const outputs[MCU_NPU_DETECT_NUM_OUTPUTS],
                   mcu_npu_detect_work_t *work,
                   mcu_npu_detection_t dets[MCU_NPU_DETECT_MAX_BOXES])
{
    const mcu_npu_detect_elem_t *sp = outputs[MCU_NPU_DETECT_CLS_OUTPUT] +
                                      MCU_NPU_DETECT_CLS_OFFSET;
    cand_t *h = work->cand;
    uint32_t n = 0u, a, i;
    int kept = 0;

    /* candidates: the MAX_CANDIDATES best over the threshold, in a heap worst first */
    for (a = 0u; a < (uint32_t)MCU_NPU_DETECT_ANCHORS; a++) {
        const mcu_npu_detect_elem_t *s = sp + (uint32_t)MCU_NPU_DETECT_CLS_ANCHOR_STRIDE * a;
        value_t best = CLS_VALUE(CLS_AT(s, 0));
        uint16_t cls = 0u;
        uint32_t c;
        for (c = 1u; c < (uint32_t)MCU_NPU_DETECT_CLASSES; c++) {
            value_t v = CLS_VALUE(CLS_AT(s, c));
            if (v > best) { best = v; cls = (uint16_t)c; }
        }
#if MCU_NPU_DETECT_OBJECTNESS
        {
            value_t obj = VALUE(OBJ, a);
#if MCU_NPU_DETECT_INT8
            best = max_v(obj, 0) * max_v(best, 0);
#else
            best = obj * best;
#endif
        }
#endif
        if (!(best > MCU_NPU_DETECT_SCORE_THRESHOLD)) continue;
        cand_t cand;
        cand.score = best; cand.anchor = a; cand.cls = cls;
        if (n < (uint32_t)MCU_NPU_DETECT_MAX_CANDIDATES) {
            h[n] = cand;
            sift_up(h, n);
            n++;
        } else if (worse(&h[0], &cand)) {
            h[0] = cand;
            sift_down(h, 0u, n);
        }
    }
    /* heap sort: the worst goes last, so the array ends best first */
    for (i = n; i > 1u; i--) {
        cand_t t = h[0]; h[0] = h[i - 1u]; h[i - 1u] = t;
        sift_down(h, 0u, i - 1u);
    }
    /* greedy NMS in that order */
    for (i = 0u; i < n && kept < MCU_NPU_DETECT_MAX_BOXES; i++) {
        value_t box[4];
        int j, dropped = 0;
        decode(outputs, h[i].anchor, box);
        area_t box_area = area(box[0], box[1], box[2], box[3]);
        for (j = 0; j < kept && !dropped; j++) {
#if !MCU_NPU_DETECT_CLASS_AGNOSTIC
            if (dets[j].cls != h[i].cls) continue;
#endif
            dropped = overlaps(box, box_area, &dets[j]);
        }
        if (dropped) continue;
        dets[kept].x1 = box[0]; dets[kept].y1 = box[1];
        dets[kept].x2 = box[2]; dets[kept].y2 = box[3];
        dets[kept].score = h[i].score;
        dets[kept].anchor = h[i].anchor;
        dets[kept].cls = h[i].cls;
        kept++;
    }
    return kept;
}
"""


def detect_files(p: Plan) -> dict[str, str]:
    """``{file name: text}`` of the C for ``p``."""
    return {HEADER: header_text(p), SOURCE: SOURCE_TEXT}


def output_specs(buffer: bytes, report) -> list[dict]:
    """Per output of the program's default method: ``shape``, ``dtype`` and, for int8 I/O,
    ``scale`` / ``zero_point`` from the report's io table."""
    from ..runtime.kernels import dtype_of
    from ..runtime.pte import Program

    plans = {e.name: e for e in Program(bytes(buffer))._pte.program.execution_plan}
    method = plans.get("forward") or next(iter(plans.values()))
    io = (getattr(report, "io", None) or {}).get("outputs", []) if report is not None else []
    specs = []
    for k, index in enumerate(method.outputs):
        val = method.values[index].val
        if type(val).__name__ != "Tensor":
            specs.append({"shape": [], "dtype": type(val).__name__})
            continue
        q = io[k] if k < len(io) else {}
        specs.append({"shape": [int(d) for d in val.sizes],
                      "dtype": str(dtype_of(val.scalar_type)).removeprefix("torch."),
                      "scale": q.get("scale"), "zero_point": q.get("zero_point", 0)})
    return specs


def program_assemble(report):
    """The report's record of how the program's parts make the model's outputs (None when
    no output was split): the post-processing's layout describes the model's outputs."""
    return ((getattr(report, "program_io", None) or {}) if report is not None else {}) \
        .get("assemble") or None


def write_detect_c(directory, buffer: bytes, report, layout, *, score: float = 0.25,
                   iou: float = 0.45, max_boxes: int = 100,
                   max_candidates: int = DEFAULT_MAX_CANDIDATES,
                   class_agnostic: bool = False) -> tuple[Path, Path]:
    """Write ``mcu_npu_detect.h`` and ``mcu_npu_detect.c`` into ``directory`` (both or
    neither) for the program ``buffer`` with ``report`` (``mcu_npu.detect.plan`` for the
    other arguments; ``layout`` describes the model's outputs, found in the program's parts
    with the report's assemble record); returns their paths."""
    directory = Path(os.fspath(directory))
    if directory.suffix in (".h", ".c"):
        raise ConfigError(f"save_detect_c writes two files into a folder, not to "
                          f"'{directory}': give the folder (it writes {HEADER} and {SOURCE})")
    p = plan(layout, output_specs(buffer, report), score=score, iou=iou, max_boxes=max_boxes,
             max_candidates=max_candidates, class_agnostic=class_agnostic,
             assemble=program_assemble(report))
    files = detect_files(p)
    paths = write_all([(directory / name, text.encode("ascii")) for name, text in files.items()])
    return paths[0], paths[1]
