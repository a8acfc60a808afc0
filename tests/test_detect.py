"""Detector post-processing on the host (``mcu_npu.detect``): against a straightforward
reference (per-class greedy NMS, then the best ``max_boxes`` overall), the tie, class,
threshold and IoU rules, and the errors a bad layout or threshold gives (issue 52,
deliver 3)."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from mcu_npu.detect import IOU_DEN, DetectionLayout, detect, output_specs, plan
from mcu_npu.errors import ConfigError


def reference(boxes, scores, *, score, iou, max_boxes=100, max_candidates=1024,
              class_agnostic=False):
    """Anchors kept, best first: per anchor the first best class, candidates over ``score``
    (the ``max_candidates`` best), greedy NMS in each class on its own with IoU computed
    by division, then the ``max_boxes`` best of all classes. ``boxes`` x1, y1, x2, y2."""
    best = [max(range(len(s)), key=lambda c: (s[c], -c)) for s in scores]
    key = [s[c] for s, c in zip(scores, best)]
    cands = sorted((a for a in range(len(boxes)) if key[a] > score),
                   key=lambda a: (-key[a], a))[:max_candidates]

    def overlap(a, b):
        (ax1, ay1, ax2, ay2), (bx1, by1, bx2, by2) = boxes[a], boxes[b]
        iw, ih = min(ax2, bx2) - max(ax1, bx1), min(ay2, by2) - max(ay1, by1)
        if iw <= 0 or ih <= 0:
            return 0
        inter = iw * ih
        return inter / ((ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter)

    kept = []
    for group in ({0} if class_agnostic else set(best)):
        mine = []
        for a in cands:
            if (class_agnostic or best[a] == group) and all(overlap(a, k) <= iou
                                                            for k in mine):
                mine.append(a)
        kept += mine
    return sorted(kept, key=lambda a: (-key[a], a))[:max_boxes], best


def random_outputs(seed, anchors=80, classes=3):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(2, anchors, generator=g) * 30
    wh = 3 + torch.rand(2, anchors, generator=g) * 12
    scores = torch.rand(classes, anchors, generator=g)
    xy[:, 5:9], wh[:, 5:9], scores[:, 5:9] = xy[:, 30:34], wh[:, 30:34], scores[:, 30:34]
    scores[1, 40:50] = scores[0, 40:50]  # equal class scores: the first class wins
    return torch.cat([xy, wh, scores]).unsqueeze(0)


OPTIONS = [{}, {"iou": 0.3}, {"max_boxes": 5}, {"class_agnostic": True},
           {"max_candidates": 12, "iou": 0.6}]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(o) or "defaults")
def test_float_outputs_match_the_reference(seed, options):
    y = random_outputs(seed)
    v = y[0].double().tolist()
    boxes = [(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
             for cx, cy, w, h in zip(*v[:4])]
    scores = [list(s) for s in zip(*v[4:])]
    d = detect(y, DetectionLayout(classes=3), score=0.4, **options)
    want, best = reference(boxes, scores, score=0.4, iou=options.get("iou", 0.45),
                           **{k: x for k, x in options.items() if k != "iou"})
    assert d.anchors.tolist() == want
    assert d.classes.tolist() == [best[a] for a in want]
    assert torch.equal(d.boxes, torch.tensor([boxes[a] for a in want],
                                             dtype=torch.float32).reshape(-1, 4))
    assert len(want) > 0 and len(want) < 80


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(o) or "defaults")
def test_int8_outputs_match_the_exact_reference(seed, options):
    """On int8 outputs the host decides in integers; the reference in exact rationals on
    the dequantized values, the IoU threshold taken as round(iou * 65536) / 65536."""
    scale, zp = 1 / 8, -120  # boxes up to 37.5 pixels, scores in eighths: many ties
    y = random_outputs(seed)
    q = (torch.round(y / scale) + zp).to(torch.int8)
    assert torch.equal((q.double() - zp) * scale, torch.round(y.double() / scale) * scale)
    v = [[Fraction(scale) * (int(x) - zp) for x in row] for row in q[0].tolist()]
    boxes = [(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2) for cx, cy, w, h in zip(*v[:4])]
    scores = [list(s) for s in zip(*v[4:])]
    iou = options.get("iou", 0.45)
    d = detect([q], DetectionLayout(classes=3), [{"scale": scale, "zero_point": zp}],
               score=0.3, **options)
    want, best = reference(boxes, scores, score=Fraction(0.3),
                           iou=Fraction(round(iou * IOU_DEN), IOU_DEN),
                           **{k: x for k, x in options.items() if k != "iou"})
    assert d.anchors.tolist() == want
    assert d.classes.tolist() == [best[a] for a in want]
    assert d.raw_boxes.tolist() == [[int(c * 2 / Fraction(scale)) for c in boxes[a]]
                                    for a in want]
    assert d.raw_scores.tolist() == [int(scores[a][best[a]] / Fraction(scale)) for a in want]
    assert torch.equal(d.boxes, torch.tensor([[float(c) for c in boxes[a]] for a in want],
                                             dtype=torch.float32).reshape(-1, 4))
    assert 0 < len(want) < 80


def outputs(boxes, scores) -> torch.Tensor:
    """(1, 4 + classes, anchors) from per-anchor xywh boxes and class scores."""
    return torch.cat([torch.tensor(boxes, dtype=torch.float32).t(),
                      torch.tensor(scores, dtype=torch.float32).t()]).unsqueeze(0)


LAYOUT2 = DetectionLayout(classes=2)


def test_equal_scores_keep_the_lower_anchor():
    y = outputs([[5, 5, 4, 4], [20, 20, 4, 4], [5, 5, 4, 4], [20, 20, 4, 4]],
                [[0.7, 0], [0.8, 0], [0.8, 0], [0.7, 0]])
    d = detect(y, LAYOUT2)
    assert d.anchors.tolist() == [1, 2]  # 0 and 3 overlap 2 and 1 fully
    y = outputs([[5, 5, 4, 4]] * 3, [[0.5, 0]] * 3)
    assert detect(y, LAYOUT2).anchors.tolist() == [0]


def test_classes_are_suppressed_apart_unless_class_agnostic():
    y = outputs([[5, 5, 4, 4], [5, 5, 4, 4.5], [6, 5, 4, 4]],
                [[0.9, 0.1], [0.2, 0.8], [0.6, 0.1]])
    d = detect(y, LAYOUT2)
    assert d.anchors.tolist() == [0, 1] and d.classes.tolist() == [0, 1]
    assert detect(y, LAYOUT2, class_agnostic=True).anchors.tolist() == [0]
    assert detect(y, LAYOUT2, iou=0.9).anchors.tolist() == [0, 1, 2]


def test_no_candidate_no_detection():
    y = outputs([[5, 5, 4, 4], [9, 9, 2, 2]], [[0.2, 0.1], [0.25, 0.1]])
    d = detect(y, LAYOUT2, score=0.25)  # a score equal to the threshold is not over it
    assert len(d) == 0 and d.boxes.shape == (0, 4) and d.raw_boxes.shape == (0, 4)


def test_more_candidates_than_max_boxes_keeps_the_best():
    y = outputs([[4 * k, 0, 2, 2] for k in range(10)], [[0.1 * k, 0.05] for k in range(10)])
    d = detect(y, LAYOUT2, score=0.0, max_boxes=3)
    assert d.anchors.tolist() == [9, 8, 7]
    assert d.scores.tolist() == pytest.approx([0.9, 0.8, 0.7])
    assert detect(y, LAYOUT2, score=0.0, max_candidates=2).anchors.tolist() == [9, 8]


def test_int8_threshold_is_floor_of_score_over_scale():
    """v > floor(score / s), the same as s * v > score: a score on the threshold is out."""
    lay = DetectionLayout(classes=1)
    p = plan(lay, [{"shape": [1, 5, 4], "dtype": "int8", "scale": 0.25, "zero_point": 0}],
             score=0.5)
    assert p.threshold == 2
    q = torch.tensor([[[0, 8, 16, 24], [0] * 4, [4] * 4, [4] * 4, [1, 2, 3, 4]]],
                     dtype=torch.int8)
    d = detect(q, lay, [{"scale": 0.25, "zero_point": 0}], score=0.5)
    assert d.anchors.tolist() == [3, 2]
    assert d.scores.tolist() == [1.0, 0.75] and d.raw_scores.tolist() == [4, 3]
    obj = DetectionLayout(classes=1, objectness=True)
    p = plan(obj, [{"shape": [1, 6, 4], "dtype": "int8", "scale": 0.1, "zero_point": -5}],
             score=0.25)
    assert p.threshold == 24  # floor(0.25 / 0.01): objectness * class in s^2 steps


def test_int8_iou_on_the_threshold_is_not_suppressed():
    """IoU exactly 0.5 (inter 8, union 16 in half steps): kept at iou=0.5, not at 0.49."""
    lay = DetectionLayout(classes=1, boxes="xyxy")
    q = torch.tensor([[[0, 0], [0, 0], [2, 2], [2, 1], [9, 8]]], dtype=torch.int8)
    quant = [{"scale": 1.0, "zero_point": 0}]
    assert detect(q, lay, quant, iou=0.5).anchors.tolist() == [0, 1]
    assert detect(q, lay, quant, iou=0.49).anchors.tolist() == [0]


def test_layouts_read_the_same_detections():
    """YOLOv8 (channels, anchors), YOLOv5 (anchors, channels) and split outputs of the
    same values give the same detections."""
    y = random_outputs(4)
    want = detect(y, DetectionLayout(classes=3), score=0.3)
    assert len(want) > 0
    t = detect(y.transpose(1, 2), DetectionLayout(classes=3, anchors_last=False), score=0.3)
    s = detect([y[:, 4:], y[:, :4]], DetectionLayout(classes=3, outputs=(1, 0)), score=0.3)
    ones = torch.ones(1, 1, y.shape[2])
    o = detect([y[:, :4], torch.cat([ones, y[:, 4:]], 1)],
               DetectionLayout(classes=3, objectness=True, outputs=(0, 1)), score=0.3)
    for d in (t, s, o):
        assert torch.equal(d.anchors, want.anchors) and torch.equal(d.boxes, want.boxes)


@pytest.mark.parametrize("make, message", [
    (lambda: detect(torch.zeros(1, 8, 10), DetectionLayout(classes=3)),
     "need 7 channels.*has 8.*classes="),
    (lambda: detect(torch.zeros(1, 10, 7), DetectionLayout(classes=3)),
     "anchors_last=False"),
    (lambda: detect(torch.zeros(2, 7, 10), DetectionLayout(classes=3)), r"not \(1, channels"),
    (lambda: detect([torch.zeros(1, 4, 10), torch.zeros(1, 3, 9)],
                    DetectionLayout(classes=3, outputs=(0, 1))), "10 anchors.*9"),
    (lambda: detect(torch.zeros(1, 7, 10), DetectionLayout(classes=3, outputs=(0, 1))),
     "names output 1 but the program has 1"),
    (lambda: detect(torch.zeros(1, 7, 10), DetectionLayout(classes=3), iou=0),
     r"iou=0 must be in \(0, 1\]"),
    (lambda: detect(torch.zeros(1, 7, 10), DetectionLayout(classes=3), iou=1.5),
     r"iou=1.5 must be in \(0, 1\]"),
    (lambda: detect(torch.zeros(1, 7, 10), DetectionLayout(classes=3), score=float("nan")),
     "finite"),
    (lambda: detect(torch.zeros(1, 7, 10, dtype=torch.int8), DetectionLayout(classes=3)),
     "int8 but its scale.*prog.report.io"),
    (lambda: detect([torch.zeros(1, 4, 10), torch.zeros(1, 3, 10, dtype=torch.int8)],
                    DetectionLayout(classes=3, outputs=(0, 1))), "all be int8"),
    (lambda: detect(torch.zeros(1, 7, 10), DetectionLayout(classes=3), max_boxes=0),
     "max_boxes=0"),
    (lambda: DetectionLayout(classes=3, boxes="cxcywh"), "not a box format"),
    (lambda: DetectionLayout(classes=0), "number of classes"),
    (lambda: DetectionLayout(classes=3, outputs=(1, 1)), "two different ones"),
])
def test_bad_input_is_refused(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_output_specs_read_the_report_io_table():
    io = {"outputs": [{"scale": 0.5, "zero_point": 3}]}
    spec = output_specs([torch.zeros(1, 7, 4, dtype=torch.int8)], io)[0]
    assert spec == {"shape": [1, 7, 4], "dtype": "int8", "scale": 0.5, "zero_point": 3}
