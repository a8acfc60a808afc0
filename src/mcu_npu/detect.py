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
    """Where a detector's boxes and scores are in the program's outputs (module docstring).
    ``outputs``: one index (boxes, [objectness,] class scores in one tensor) or two (box
    output, score output)."""

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
    """Where one kind of value (boxes or scores) is: output ``output``, element ``offset``
    of its channel 0, ``channel`` / ``anchor`` the element strides."""

    output: int
    offset: int
    channel: int
    anchor: int
    scale: float | None = None
    zero_point: int = 0


@dataclass(frozen=True)
class Plan:
    """A layout resolved against the outputs' shapes and parameters, with the thresholds as
    the C takes them: what the host and the C both compute from."""

    layout: DetectionLayout
    anchors: int
    box: Part
    score: Part
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

    @property
    def box_unit(self) -> float:
        """What one step of an integer box coordinate is (half the box output's scale)."""
        return self.box.scale / 2 if self.integer else 1.0

    @property
    def score_unit(self) -> float:
        """What one step of an integer score is (``s``, or ``s^2`` with objectness)."""
        if not self.integer:
            return 1.0
        return self.score.scale ** 2 if self.layout.objectness else self.score.scale


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
    """(channels, anchors, channel stride, anchor stride) of an output of ``shape`` read as
    ``(channels, anchors)`` or ``(anchors, channels)`` with leading dimensions of 1."""
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
    return c, a, (a, 1) if anchors_last else (1, c)


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


def plan(layout: DetectionLayout, specs, *, score: float = 0.25, iou: float = 0.45,
         max_boxes: int = 100, max_candidates: int = DEFAULT_MAX_CANDIDATES,
         class_agnostic: bool = False) -> Plan:
    """Resolve ``layout`` against ``specs`` (per program output, a dict with ``shape``,
    ``dtype`` ("int8" or "float32") and, for int8, ``scale`` and ``zero_point``), with the
    thresholds converted as the module docstring says. ConfigError on a layout that does
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
    for k in layout.outputs:
        if k >= len(specs):
            raise ConfigError(f"DetectionLayout(outputs={layout.outputs}) names output {k} "
                              f"but the program has {len(specs)} outputs")
    dtypes = {str(specs[k]["dtype"]).removeprefix("torch.") for k in layout.outputs}
    if not (dtypes <= {"int8"} or dtypes <= {"float32"}):
        raise ConfigError(f"the detector outputs are {sorted(dtypes)}: they must all be int8 "
                          "(compile with io='int8') or all float32 (io='float')")
    integer = dtypes == {"int8"}
    box_k, score_k = layout.outputs if len(layout.outputs) == 2 else layout.outputs * 2
    if len(layout.outputs) == 1:
        channels = 4 + layout.score_channels
        _, anchors, (ch, an) = _matrix(specs[box_k]["shape"], channels, layout.anchors_last,
                                       "boxes and scores", box_k)
        box_off, score_off = 0, 4 * ch
        score_anchors = anchors
        sch, san = ch, an
    else:
        _, anchors, (ch, an) = _matrix(specs[box_k]["shape"], 4, layout.anchors_last,
                                       "boxes", box_k)
        _, score_anchors, (sch, san) = _matrix(specs[score_k]["shape"], layout.score_channels,
                                               layout.anchors_last, "scores", score_k)
        box_off = score_off = 0
    if score_anchors != anchors:
        raise ConfigError(f"the box output has {anchors} anchors but the score output has "
                          f"{score_anchors}: check DetectionLayout(outputs=, anchors_last=)")
    if anchors > (1 << 24):
        raise ConfigError(f"{anchors} anchors is more than this post-processing takes (2^24)")
    bs, bz = _param(specs[box_k], box_k, integer)
    ss, sz = _param(specs[score_k], score_k, integer)
    if integer:
        unit = ss * ss if layout.objectness else ss
        threshold = min(max(math.floor(score / unit), -(1 << 31)), (1 << 31) - 1)
    else:
        threshold = float(np.float32(score))
    return Plan(layout, anchors, Part(box_k, box_off, ch, an, bs, bz),
                Part(score_k, score_off, sch, san, ss, sz), integer, threshold, float(score),
                float(iou),
                int(round(iou * IOU_DEN)), max_boxes, min(max_candidates, anchors),
                bool(class_agnostic), len(specs))


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
    flats = {}
    for k in {plan_.box.output, plan_.score.output}:
        t = outputs[k]
        flats[k] = t.detach().cpu().contiguous().reshape(-1).numpy().astype(dtype)

    def values(part: Part, channel: int) -> np.ndarray:
        col = _column(flats[part.output], part, channel, n)
        return col - part.zero_point if plan_.integer else col

    obj = int(lay.objectness)
    best, cls = _best([values(plan_.score, obj + c) for c in range(lay.classes)])
    if lay.objectness:
        o = values(plan_.score, 0)
        key = np.maximum(o, 0) * np.maximum(best, 0) if plan_.integer else o * best
    else:
        key = best
    thr = plan_.threshold if plan_.integer else np.float32(plan_.threshold)
    cand = np.nonzero(key > thr)[0]
    order = cand[np.lexsort((cand, -key[cand]))][:plan_.max_candidates]

    v = [values(plan_.box, c) for c in range(4)]
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
    dict (or None) per output, or None."""
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
           class_agnostic: bool = False) -> Detections:
    """Threshold, top-k and class-wise NMS on a detector's ``outputs`` (tensors as
    ``prog.run`` returns them; ``quant``: their int8 parameters, see ``output_specs``),
    integer-only when they are int8 (the module docstring gives the rules)."""
    outputs = list(outputs) if not isinstance(outputs, torch.Tensor) else [outputs]
    p = plan(layout, output_specs(outputs, quant), score=score, iou=iou, max_boxes=max_boxes,
             max_candidates=max_candidates, class_agnostic=class_agnostic)
    return run(p, outputs)
