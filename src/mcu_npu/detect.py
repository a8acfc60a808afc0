"""Object-detector post-processing on the host: score threshold, top-k and class-wise NMS on
a program's outputs, computing exactly what the C that ``firmware.detect_c`` writes computes
on the board, so the firmware's detections can be checked against the host's.

A ``DetectionLayout`` says where boxes and scores are in the outputs: one tensor
``(1, 4 [+ 1] + classes, anchors)`` (YOLOv8: boxes then class scores; with
``objectness=True`` YOLOv5's objectness between them; ``anchors_last=False`` for
``(1, anchors, channels)``), or two outputs, boxes ``(1, 4, anchors)`` and scores
``(1, [1 +] classes, anchors)`` (``outputs=(box_output, score_output)``, e.g. a model
ending in ``return boxes, scores``, or SSD-style decoded outputs with
``anchors_last=False``). Boxes are ``xywh`` (centre, size) or ``xyxy`` corners, in the
output's own units (pixels or normalised: NMS does not depend on them).

The procedure, the same for both paths:

1. per anchor, the best class: the first class whose score is greater than every one
   before it; with objectness the anchor's score is ``objectness * best class score``;
2. candidates: anchors whose score is greater than the threshold (``score > threshold``);
3. the ``max_candidates`` best of them, by score then lower anchor index (a total order,
   so the result is deterministic);
4. greedy NMS in that order: a candidate is dropped when its IoU with a box kept before it
   of the same class (any class with ``class_agnostic``) is greater than ``iou``; it stops
   at ``max_boxes`` boxes kept.

Integer rules (int8 outputs, with each output's scale ``s`` and zero point ``z``):

- values are taken as ``v = q - z`` (int32); boxes in half steps of the box output's scale:
  ``x1 = 2 cx - w``, ``x2 = 2 cx + w`` (``xywh``) or ``x1 = 2 x1`` (``xyxy``), so a
  coordinate is ``x * s / 2``;
- a score is ``v`` (``s v`` in float); with objectness ``max(v_obj, 0) * max(v_cls, 0)``
  (``s^2`` times it in float);
- the threshold becomes the integer ``T = floor(score / s)`` (``floor(score / s^2)`` with
  objectness), computed once in double precision; a candidate has ``v > T``, which is
  ``s v > score`` exactly;
- ``iou`` becomes ``N = round(iou * 65536)``; a box is suppressed when
  ``inter * 65536 > N * union`` in int64 (widths and heights below zero count as zero; no
  overlap when the intersection's width or height is not positive).

A program that split a mixed-range output into parts (``passes.edge.SplitMixedRangeOutputs``:
boxes and scores each in their own int8 scale) is read as the firmware reads it: the layout
still describes the *model's* outputs, and the report's assemble record
(``program_io["assemble"]``) maps each of its channels (each box coordinate, objectness,
the class scores) onto the program's raw outputs: a channel comes from one part, its anchors
at a constant stride, the class scores from one part at a constant channel stride (ConfigError
otherwise). Each part is read with its own scale and zero point:

- box coordinates from parts of one scale ``s`` are as above (half steps of ``s``); from
  parts of different scales (``s_max`` the largest) each value is first brought to the
  common unit ``s_max / 4096`` by an integer multiplier ``m = round(4096 s / s_max)``
  (``v m``; exact when ``s / s_max`` is a multiple of 2^-12, otherwise within half a unit per
  step, a relative error of at most ``1 / (2 m)``), so a coordinate is ``x * s_max / 8192``;
  a part whose scale is below ``s_max / 8192`` (``m`` would be 0) is refused;
- the class scores' threshold is converted with their part's scale ``s_c``, and objectness
  from another part of scale ``s_o`` gives scores in steps of ``s_o s_c``:
  ``T = floor(score / (s_o s_c))``, still exact.

Areas, intersections and unions are int64 on the integer path.

Float outputs are processed in float32, operation for operation as the C does (``min`` /
``max`` as ``a < b ? a : b`` / ``a > b ? a : b``; ``x1 = cx - w * 0.5``; suppressed when
``inter > iou * union``, union ``(area_a + area_b) - inter``, each product rounded: the C
turns fused multiply-add off), so the C gives the same detections.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from .errors import ConfigError

IOU_DEN = 1 << 16
"""The IoU threshold is ``N / IOU_DEN`` on the integer path."""
DEFAULT_MAX_CANDIDATES = 1024
"""Candidates entering NMS, at most (the C's work area holds this many)."""
_BOXES = ("xywh", "xyxy")


@dataclass(frozen=True)
class DetectionLayout:
    """Where a detector's boxes and scores are in the model's outputs (module docstring).
    ``outputs``: one index (boxes, [objectness,] class scores in one tensor) or two (box
    output, score output). When the program returns a split output as parts, the indices
    and shapes are still the model's: the post-processing finds each channel in the parts."""

    classes: int
    boxes: str = "xywh"
    anchors_last: bool = True
    objectness: bool = False
    outputs: tuple[int, ...] = (0,)

    def __post_init__(self):
        if self.boxes not in _BOXES:
            raise ConfigError(f"DetectionLayout(boxes={self.boxes!r}) is not a box format: "
                              "use 'xywh' (centre x, centre y, width, height) or 'xyxy' "
                              "(corners)")
        if isinstance(self.classes, bool) or not isinstance(self.classes, int) or \
                not 1 <= self.classes <= 65535:
            raise ConfigError(f"DetectionLayout(classes={self.classes!r}) must be the number "
                              "of classes, an integer from 1 to 65535")
        outputs = tuple(self.outputs) if isinstance(self.outputs, (tuple, list)) else \
            (self.outputs,)
        if len(outputs) not in (1, 2) or any(
                isinstance(k, bool) or not isinstance(k, int) or k < 0 for k in outputs) or \
                len(set(outputs)) != len(outputs):
            raise ConfigError(f"DetectionLayout(outputs={self.outputs!r}) must name one "
                              "output (boxes and scores in one tensor) or two different ones "
                              "(box output, score output), as indices of the program's "
                              "outputs")
        object.__setattr__(self, "outputs", outputs)

    @property
    def score_channels(self) -> int:
        """Channels of the scores: the classes, and objectness before them."""
        return self.classes + int(self.objectness)


@dataclass(frozen=True)
class Part:
    """Where one channel (or, for the class scores, a run of channels) is in the program's
    raw outputs: output ``output``, element ``offset`` of its anchor 0 (class 0),
    ``channel`` / ``anchor`` the element strides; ``multiplier`` brings a box coordinate to
    the plan's common box unit on the integer path (module docstring)."""

    output: int
    offset: int
    channel: int
    anchor: int
    scale: float | None = None
    zero_point: int = 0
    multiplier: int = 1


@dataclass(frozen=True)
class Plan:
    """A layout resolved against the program's outputs (shapes, parameters and, for a split
    output, the assemble record), with the thresholds as the C takes them: what the host and
    the C both compute from."""

    layout: DetectionLayout
    anchors: int
    boxes: tuple[Part, Part, Part, Part]
    """Per box coordinate (x, y, w, h or x1, y1, x2, y2)."""
    objectness: Part | None
    scores: Part
    """The class scores: ``channel`` the stride from one class to the next."""
    integer: bool
    threshold: float | int
    """Integer path: ``T`` (a candidate has score ``> T``); float path: the float32 score."""
    score_float: float
    """The score threshold as given."""
    iou: float
    iou_num: int
    max_boxes: int
    max_candidates: int
    class_agnostic: bool
    num_outputs: int
    box_unit: float
    """What one step of an integer box coordinate is (half the box scale, or
    ``s_max / 8192`` for box parts of different scales); 1.0 on the float path."""

    @property
    def score_unit(self) -> float:
        """What one step of an integer score is (``s``, or ``s_o s`` with objectness)."""
        if not self.integer:
            return 1.0
        unit = self.scores.scale
        return unit * self.objectness.scale if self.objectness is not None else unit

    @property
    def used_outputs(self) -> list[int]:
        """The program outputs the post-processing reads, in order."""
        parts = [*self.boxes, self.scores] + \
            ([self.objectness] if self.objectness is not None else [])
        return sorted({p.output for p in parts})


@dataclass(frozen=True)
class Detections:
    """Detections, best first: ``boxes`` (K, 4) x1, y1, x2, y2 float in the output's units,
    ``scores`` (K,), ``classes`` and ``anchors`` (K,) int64. ``raw_boxes`` / ``raw_scores``
    are what the C returns: int32 half steps and integer scores on the int8 path (see the
    module docstring), the float32 values on the float path."""

    boxes: torch.Tensor
    scores: torch.Tensor
    classes: torch.Tensor
    anchors: torch.Tensor
    raw_boxes: torch.Tensor = field(repr=False)
    raw_scores: torch.Tensor = field(repr=False)

    def __len__(self) -> int:
        return int(self.classes.numel())


def _matrix(shape, channels: int, anchors_last: bool, what: str, index: int) -> tuple:
    """(channels, anchors) of a model output of ``shape`` read as ``(channels, anchors)`` or
    ``(anchors, channels)`` with leading dimensions of 1."""
    shape = tuple(int(d) for d in shape)
    order = "(1, channels, anchors)" if anchors_last else "(1, anchors, channels)"
    if len(shape) < 2 or any(d != 1 for d in shape[:-2]):
        raise ConfigError(f"output {index} has shape {list(shape)}, not {order}: the "
                          f"DetectionLayout expects {what} there; give the right "
                          "DetectionLayout(outputs=...)")
    c, a = shape[-2:] if anchors_last else shape[-2:][::-1]
    if c != channels:
        flip = "False" if anchors_last else "True"
        raise ConfigError(f"output {index} has shape {list(shape)}: {what} need {channels} "
                          f"channels in a {order} tensor but it has {c}; check "
                          "DetectionLayout(classes=, objectness=) or use "
                          f"anchors_last={flip} if the anchors are the other dimension")
    return c, a


def _param(spec, index: int, integer: bool) -> tuple[float | None, int]:
    if not integer:
        return None, 0
    spec = spec or {}
    scale = spec.get("scale")
    if scale is None:
        raise ConfigError(f"output {index} is int8 but its scale and zero point are not "
                          "known: give the program's report io table (prog.report.io) or "
                          "[{'scale': s, 'zero_point': z}] per output")
    scale = float(scale)
    if not math.isfinite(scale) or scale <= 0:
        raise ConfigError(f"output {index}'s scale {scale!r} is not a positive number")
    return scale, int(spec.get("zero_point", 0))


_PART_SHIFT = 40
"""Element ids of the program's outputs: ``output << _PART_SHIFT | flat index``."""
BOX_ONE = 4096
"""Box parts of different scales: the common unit is the largest scale over this."""


def _model_ids(specs: list, assemble) -> list[torch.Tensor]:
    """Per model output, a tensor of its shape holding each element's id in the program's
    raw outputs (``_PART_SHIFT``): the assemble record applied to the outputs' ids."""
    ids = []
    for k, spec in enumerate(specs):
        shape = [int(d) for d in spec.get("shape", [])]
        n = int(np.prod(shape)) if shape else 1
        ids.append((torch.arange(n, dtype=torch.int64) + (k << _PART_SHIFT)).reshape(shape))
    if not assemble:
        return ids
    from .device.output_parts import assemble as put_together

    try:
        return put_together(list(assemble), ids)
    except (IndexError, KeyError, RuntimeError, TypeError) as e:
        raise ConfigError(f"the assemble record {assemble!r} does not fit the program's "
                          f"{len(specs)} outputs ({e}): give the report of this program") \
            from None


def _locate(row: np.ndarray, what: str, index: int) -> tuple[int, int, int]:
    """(program output, offset, anchor stride) of one channel's ids ``row``."""
    outs = np.unique(row >> _PART_SHIFT)
    flat = row & ((1 << _PART_SHIFT) - 1)
    stride = int(flat[1] - flat[0]) if len(flat) > 1 else 0
    if len(outs) != 1 or (len(flat) > 1 and stride <= 0) or \
            np.any(flat != flat[0] + stride * np.arange(len(flat))):
        source = f"program outputs {outs.tolist()}" if len(outs) > 1 else "its part"
        raise ConfigError(f"{what} of output {index} is assembled from {source} in an order "
                          "this post-processing does not read (one part per channel, its "
                          "anchors at a constant stride)")
    return int(outs[0]), int(flat[0]), stride


def plan(layout: DetectionLayout, specs, *, score: float = 0.25, iou: float = 0.45,
         max_boxes: int = 100, max_candidates: int = DEFAULT_MAX_CANDIDATES,
         class_agnostic: bool = False, assemble=None) -> Plan:
    """Resolve ``layout`` against ``specs`` (per program output, a dict with ``shape``,
    ``dtype`` ("int8" or "float32") and, for int8, ``scale`` and ``zero_point``), with the
    thresholds converted as the module docstring says. ``assemble``: the report's assemble
    record when the program split outputs into parts (``program_io["assemble"]``); then
    ``layout`` describes the model's outputs it makes. ConfigError on a layout that does
    not match the outputs or a bad threshold."""
    if not isinstance(layout, DetectionLayout):
        raise ConfigError(f"layout must be a mcu_npu.detect.DetectionLayout, not "
                          f"{type(layout).__name__}")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or \
            not math.isfinite(score):
        raise ConfigError(f"score={score!r} must be a finite number (the score threshold)")
    if isinstance(iou, bool) or not isinstance(iou, (int, float)) or not 0 < iou <= 1:
        raise ConfigError(f"iou={iou!r} must be in (0, 1]: the IoU above which a box of "
                          "the same class is suppressed (e.g. 0.45)")
    for name, value, top in (("max_boxes", max_boxes, 65535),
                             ("max_candidates", max_candidates, 1 << 20)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise ConfigError(f"{name}={value!r} must be an integer from 1 to {top}")
    specs = list(specs)
    models = _model_ids(specs, assemble)
    for k in layout.outputs:
        if k >= len(models):
            raise ConfigError(f"DetectionLayout(outputs={layout.outputs}) names output {k} "
                              f"but the {'model' if assemble else 'program'} has "
                              f"{len(models)} outputs")
    box_k, score_k = layout.outputs if len(layout.outputs) == 2 else layout.outputs * 2

    def rows(k: int, channels: int, what: str) -> np.ndarray:
        """The ids of model output ``k`` as (channels, anchors)."""
        ids = models[k]
        _matrix(ids.shape, channels, layout.anchors_last, what, k)
        m = ids.reshape(ids.shape[-2:]).numpy()
        return m if layout.anchors_last else m.T

    if len(layout.outputs) == 1:
        m = rows(box_k, 4 + layout.score_channels, "boxes and scores")
        box_rows, score_rows = m[:4], m[4:]
    else:
        box_rows = rows(box_k, 4, "boxes")
        score_rows = rows(score_k, layout.score_channels, "scores")
        if score_rows.shape[1] != box_rows.shape[1]:
            raise ConfigError(f"the box output has {box_rows.shape[1]} anchors but the score "
                              f"output has {score_rows.shape[1]}: check "
                              "DetectionLayout(outputs=, anchors_last=)")
    anchors = int(box_rows.shape[1])
    if anchors > (1 << 24):
        raise ConfigError(f"{anchors} anchors is more than this post-processing takes (2^24)")
    used = np.unique(np.concatenate([box_rows.reshape(-1), score_rows.reshape(-1)])
                     >> _PART_SHIFT).tolist()
    dtypes = {str(specs[k]["dtype"]).removeprefix("torch.") for k in used}
    if not (dtypes <= {"int8"} or dtypes <= {"float32"}):
        raise ConfigError(f"the detector outputs are {sorted(dtypes)}: they must all be int8 "
                          "(compile with io='int8') or all float32 (io='float')")
    integer = dtypes == {"int8"}

    def part(row, what, k, channel=0) -> Part:
        out, offset, stride = _locate(row, what, k)
        scale, zp = _param(specs[out], out, integer)
        return Part(out, offset, channel, stride, scale, zp)

    names = ("x", "y", "w", "h") if layout.boxes == "xywh" else ("x1", "y1", "x2", "y2")
    boxes = [part(r, f"box channel {n}", box_k) for r, n in zip(box_rows, names)]
    obj = int(layout.objectness)
    objectness = part(score_rows[0], "the objectness channel", score_k) if obj else None
    classes = [part(r, f"class {c}'s channel", score_k)
               for c, r in enumerate(score_rows[obj:])]
    first = classes[0]
    step = classes[1].offset - first.offset if len(classes) > 1 else 0
    if any(c.output != first.output or c.anchor != first.anchor or
           c.offset != first.offset + i * step for i, c in enumerate(classes)):
        source = "several program outputs" if len({c.output for c in classes}) > 1 else \
            "one part in an uneven order"
        raise ConfigError(f"the class scores of output {score_k} come from {source}: this "
                          "post-processing reads them from one part (one scale, so the best "
                          "class is an integer comparison)")
    scores = Part(first.output, first.offset, step, first.anchor, first.scale,
                  first.zero_point)
    if integer:
        top = max(b.scale for b in boxes)
        if all(b.scale == top for b in boxes):
            box_unit = top / 2
        else:
            mults = [int(round(BOX_ONE * b.scale / top)) for b in boxes]
            if min(mults) == 0:
                raise ConfigError(f"the box coordinates' scales {[b.scale for b in boxes]} "
                                  f"differ more than {2 * BOX_ONE}x: no common integer unit")
            boxes = [Part(b.output, b.offset, b.channel, b.anchor, b.scale, b.zero_point, m)
                     for b, m in zip(boxes, mults)]
            box_unit = top / BOX_ONE / 2
        unit = scores.scale * objectness.scale if obj else scores.scale
        threshold = min(max(math.floor(score / unit), -(1 << 31)), (1 << 31) - 1)
    else:
        box_unit = 1.0
        threshold = float(np.float32(score))
    return Plan(layout, anchors, tuple(boxes), objectness, scores, integer, threshold,
                float(score), float(iou), int(round(iou * IOU_DEN)), max_boxes,
                min(max_candidates, anchors), bool(class_agnostic), len(specs), box_unit)


def _column(flat: np.ndarray, part: Part, channel: int, anchors: int) -> np.ndarray:
    start = part.offset + channel * part.channel
    return flat[start + np.arange(anchors) * part.anchor]


def _best(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The C's best-class loop: the first class greater than all before it."""
    best, cls = cols[0], np.zeros(len(cols[0]), dtype=np.int64)
    for c, col in enumerate(cols[1:], 1):
        more = col > best
        best, cls = np.where(more, col, best), np.where(more, c, cls)
    return best, cls


def _min(a, b):
    return np.where(a < b, a, b)


def _max(a, b):
    return np.where(a > b, a, b)


def run(plan_: Plan, outputs) -> Detections:
    """Detections on ``outputs`` (the program's output tensors, as ``prog.run`` returns
    them) per ``plan_`` (see ``plan``)."""
    lay, n = plan_.layout, plan_.anchors
    dtype = np.int64 if plan_.integer else np.float32
    outputs = list(outputs)
    if len(outputs) != plan_.num_outputs:
        raise ConfigError(f"the post-processing was planned for the program's "
                          f"{plan_.num_outputs} outputs but {len(outputs)} were given: give "
                          "the program's raw outputs (prog.run(..., parts=True))")
    flats = {}
    for k in plan_.used_outputs:
        t = outputs[k]
        flats[k] = t.detach().cpu().contiguous().reshape(-1).numpy().astype(dtype)

    def values(part: Part, channel: int = 0) -> np.ndarray:
        col = _column(flats[part.output], part, channel, n)
        return col - part.zero_point if plan_.integer else col

    best, cls = _best([values(plan_.scores, c) for c in range(lay.classes)])
    if lay.objectness:
        o = values(plan_.objectness)
        key = np.maximum(o, 0) * np.maximum(best, 0) if plan_.integer else o * best
    else:
        key = best
    thr = plan_.threshold if plan_.integer else np.float32(plan_.threshold)
    cand = np.nonzero(key > thr)[0]
    order = cand[np.lexsort((cand, -key[cand]))][:plan_.max_candidates]

    v = [values(b) * b.multiplier if plan_.integer else values(b) for b in plan_.boxes]
    if plan_.integer:
        if lay.boxes == "xywh":
            box = [2 * v[0] - v[2], 2 * v[1] - v[3], 2 * v[0] + v[2], 2 * v[1] + v[3]]
        else:
            box = [2 * x for x in v]
        zero = 0
    else:
        if lay.boxes == "xywh":
            hw, hh = v[2] * np.float32(0.5), v[3] * np.float32(0.5)
            box = [v[0] - hw, v[1] - hh, v[0] + hw, v[1] + hh]
        else:
            box = v
        zero = np.float32(0)
    x1, y1, x2, y2 = box
    w, h = x2 - x1, y2 - y1
    area = _max(w, zero) * _max(h, zero)
    iou_f = np.float32(plan_.iou)

    kept: list[int] = []
    for i in order:
        if kept:
            k = np.asarray(kept)
            if not plan_.class_agnostic:
                k = k[cls[k] == cls[i]]
            if len(k):
                iw = _min(x2[k], x2[i]) - _max(x1[k], x1[i])
                ih = _min(y2[k], y2[i]) - _max(y1[k], y1[i])
                inter = iw * ih
                union = area[i] + area[k] - inter
                if plan_.integer:
                    over = inter * IOU_DEN > plan_.iou_num * union
                else:
                    over = inter > iou_f * union
                if np.any((iw > zero) & (ih > zero) & over):
                    continue
        kept.append(int(i))
        if len(kept) == plan_.max_boxes:
            break
    k = np.asarray(kept, dtype=np.int64)
    raw_boxes = np.stack([b[k] for b in box], 1) if len(k) else np.zeros((0, 4), dtype)
    raw_scores = key[k]
    if plan_.integer:
        boxes = raw_boxes.astype(np.float64) * plan_.box_unit
        scores = raw_scores.astype(np.float64) * plan_.score_unit
        raw_boxes, raw_scores = raw_boxes.astype(np.int32), raw_scores.astype(np.int32)
    else:
        boxes, scores = raw_boxes, raw_scores
    return Detections(torch.from_numpy(np.asarray(boxes, np.float32)).reshape(-1, 4),
                      torch.from_numpy(np.asarray(scores, np.float32)),
                      torch.from_numpy(cls[k]), torch.from_numpy(k),
                      torch.from_numpy(np.ascontiguousarray(raw_boxes)).reshape(-1, 4),
                      torch.from_numpy(np.ascontiguousarray(raw_scores)))


def output_specs(outputs, quant=None) -> list[dict]:
    """Per output, the ``shape`` / ``dtype`` of the tensor and the ``scale`` /
    ``zero_point`` from ``quant``: a report's io table (``prog.report.io``), a list with a
    dict (or None) per output, or None. The outputs are the program's raw outputs (the parts
    of a split output, as the firmware reads them)."""
    if isinstance(quant, dict):
        quant = quant.get("outputs", [])
    quant = list(quant or [])
    specs = []
    for k, t in enumerate(outputs):
        if not isinstance(t, torch.Tensor):
            raise ConfigError(f"output {k} is a {type(t).__name__}, not a tensor")
        q = quant[k] if k < len(quant) and quant[k] else {}
        specs.append({"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."),
                      "scale": q.get("scale"), "zero_point": q.get("zero_point", 0)})
    return specs


def detect(outputs, layout: DetectionLayout, quant=None, *, score: float = 0.25,
           iou: float = 0.45, max_boxes: int = 100,
           max_candidates: int = DEFAULT_MAX_CANDIDATES,
           class_agnostic: bool = False, assemble=None) -> Detections:
    """Threshold, top-k and class-wise NMS on a detector's ``outputs`` (tensors; ``quant``:
    their int8 parameters, see ``output_specs``), integer-only when they are int8 (the
    module docstring gives the rules). ``outputs`` are the model's outputs, or the parts of
    a program that split them with ``assemble`` its record (``program_io["assemble"]``;
    taken from ``quant`` when it is a report's int8 io table holding one, as ``prog.run``
    then returns the parts). ``prog.detect`` reads the raw outputs as the C does."""
    outputs = list(outputs) if not isinstance(outputs, torch.Tensor) else [outputs]
    if assemble is None and isinstance(quant, dict) and quant.get("assemble") and \
            len(outputs) == len(quant.get("outputs", [])):
        assemble = quant["assemble"]
    p = plan(layout, output_specs(outputs, quant), score=score, iou=iou, max_boxes=max_boxes,
             max_candidates=max_candidates, class_agnostic=class_agnostic,
             assemble=assemble)
    return run(p, outputs)
