"""A detector trained here in seconds: scikit-learn's digits 0, 1 and 2, upscaled to 16 or
24 pixels, placed 1 to 3 at a time without overlap on a 48x48 noisy canvas, each with its
tight box (the ink's extent). Training canvases are made from the training split's digits,
held-out canvases from the held-out digits (``data.digits_split``), so the detector is judged
on digits it never saw. Judged by mAP@0.5 (VOC's all-point AP, averaged over the classes)
on the detections of ``mcu_npu.detect`` (class-wise NMS)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...detect import DetectionLayout, detect
from ..detectors import DFL, dist2bbox
from . import data
from .fit import deterministic

CANVAS = 48
STRIDE = 8
CLASSES = (0, 1, 2)
"""The digits detected; class k is digit ``CLASSES[k]``."""
BINS = 8
MAX_OBJECTS = 3
LAYOUT = DetectionLayout(classes=len(CLASSES))
"""The net's output: (N, 4 + classes, anchors), boxes centre and size in pixels, then class
scores."""
SCORE, IOU, MAX_BOXES = 0.05, 0.5, 10
"""``detect``'s thresholds for the mAP: a low score floor so the precision-recall curve runs
to high recall, NMS at IoU 0.5."""


class DigitsDetector(nn.Module):
    """A YOLOv8-style anchor-free detector on one stride-8 grid: 3 stride-2 convolutions and
    one more (BN, ReLU), a box branch (4 x ``BINS`` DFL logits) and a class branch, decoded in
    the graph (DFL expectation, distances to centre and size, times the stride; class
    sigmoid) into one (N, 4 + classes, 36) output."""

    def __init__(self, classes: int = len(CLASSES), c: int = 16):
        super().__init__()

        def conv(cin, cout, stride=1):
            return [nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.ReLU()]

        self.features = nn.Sequential(*conv(1, 16, 2), *conv(16, c, 2), *conv(c, c, 2),
                                      *conv(c, c))
        self.box = nn.Sequential(*conv(c, c), nn.Conv2d(c, 4 * BINS, 1))
        self.cls = nn.Sequential(*conv(c, c), nn.Conv2d(c, classes, 1))
        self.dfl = DFL(BINS)
        cells = CANVAS // STRIDE
        ys, xs = torch.meshgrid(torch.arange(cells) + 0.5, torch.arange(cells) + 0.5,
                                indexing="ij")
        self.register_buffer("anchors", torch.stack((xs.flatten(), ys.flatten())).float())

    def raw(self, x):
        """(DFL logits (N, 4 x BINS, A), class logits (N, classes, A)), what training fits."""
        f = self.features(x)
        return self.box(f).flatten(2), self.cls(f).flatten(2)

    def forward(self, x):
        box, cls = self.raw(x)
        boxes = dist2bbox(self.dfl(box), self.anchors.unsqueeze(0)) * STRIDE
        return torch.cat((boxes, cls.sigmoid()), 1)


def _digit_pool(images: torch.Tensor, labels: torch.Tensor):
    keep = [i for i, y in enumerate(labels.tolist()) if y in CLASSES]
    return images[keep, 0].numpy(), np.array([CLASSES.index(int(labels[i])) for i in keep])


def canvases(images: torch.Tensor, labels: torch.Tensor, n: int, seed: int) \
        -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` canvases (n, 1, 48, 48) float32 in [0, 1] and their objects (n, 3, 5): class,
    x1, y1, x2, y2 in pixels, class -1 where a canvas has fewer objects. Digits of
    ``CLASSES`` from ``images`` / ``labels``, each upscaled x2 or x3 (bilinear), placed where
    its patch overlaps no other (with a pixel between); background noise up to 0.15."""
    pool, classes = _digit_pool(images, labels)
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 1, CANVAS, CANVAS), np.float32)
    objects = np.full((n, MAX_OBJECTS, 5), -1.0, np.float32)
    for i in range(n):
        canvas = rng.uniform(0.0, 0.15, (CANVAS, CANVAS)).astype(np.float32)
        taken: list[tuple[int, int, int]] = []
        for _ in range(int(rng.integers(1, MAX_OBJECTS + 1))):
            j = int(rng.integers(len(pool)))
            size = 8 * int(rng.integers(2, 4))
            for _ in range(20):
                px, py = (int(v) for v in rng.integers(0, CANVAS - size + 1, 2))
                if all(px + size < a or a + s < px or py + size < b or b + s < py
                       for a, b, s in taken):
                    break
            else:
                continue
            patch = F.interpolate(torch.from_numpy(pool[j])[None, None], size=(size, size),
                                  mode="bilinear", align_corners=False)[0, 0].numpy()
            canvas[py:py + size, px:px + size] = np.maximum(
                canvas[py:py + size, px:px + size], patch)
            ink_y, ink_x = np.nonzero(patch > 0.25)
            objects[i, len(taken)] = (classes[j], px + ink_x.min(), py + ink_y.min(),
                                      px + ink_x.max() + 1, py + ink_y.max() + 1)
            taken.append((px, py, size))
        x[i, 0] = np.clip(canvas, 0.0, 1.0)
    return torch.from_numpy(x), torch.from_numpy(objects)


def targets(objects: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Training targets per anchor: (class targets (n, classes, A), distances in cells
    (n, 4, A), positive mask (n, A)). An object's positives: the cell holding its centre and
    the cells whose centres lie inside its box within one cell of its centre."""
    cells = CANVAS // STRIDE
    n = len(objects)
    cls = np.zeros((n, len(CLASSES), cells * cells), np.float32)
    dist = np.zeros((n, 4, cells * cells), np.float32)
    pos = np.zeros((n, cells * cells), bool)
    centres = np.arange(cells, dtype=np.float32) + 0.5
    ax, ay = np.meshgrid(centres, centres)  # (cells, cells), row-major like the anchors
    ax, ay = ax.ravel(), ay.ravel()
    for i, row in enumerate(objects.numpy()):
        for c, *box in row:
            if c < 0:
                continue
            x1, y1, x2, y2 = np.asarray(box) / STRIDE
            cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
            home = (np.floor(ax) == np.floor(cx)) & (np.floor(ay) == np.floor(cy))
            near = (x1 < ax) & (ax < x2) & (y1 < ay) & (ay < y2) & \
                (np.abs(ax - cx) <= 1) & (np.abs(ay - cy) <= 1)
            k = home | near
            pos[i, k] = True
            cls[i, int(c), k] = 1.0
            dist[i, :, k] = np.clip(np.stack((ax - x1, ay - y1, x2 - ax, y2 - ay), 1)[k],
                                    0, BINS - 1.01)
    return torch.from_numpy(cls), torch.from_numpy(dist), torch.from_numpy(pos)


def fit_detector(x: torch.Tensor, objects: torch.Tensor, *, epochs: int, lr: float,
                 batch: int = 32, seed: int = 0) -> DigitsDetector:
    """Train a ``DigitsDetector`` (Adam, one-cycle rate, seeded order): binary cross-entropy
    on the class logits of every anchor (per positive anchor) plus the L1 error of the DFL
    distances (cells) of the positive anchors."""
    cls_t, dist_t, pos_t = targets(objects)
    with deterministic(seed):
        model = DigitsDetector()
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=lr, total_steps=epochs * ((len(x) + batch - 1) // batch))
        order_rng = torch.Generator().manual_seed(seed)
        model.train()
        for _ in range(epochs):
            order = torch.randperm(len(x), generator=order_rng)
            for i in range(0, len(x), batch):
                idx = order[i:i + batch]
                box, cls = model.raw(x[idx])
                pos = pos_t[idx]
                npos = pos.sum().clamp(min=1)
                cls_loss = F.binary_cross_entropy_with_logits(cls, cls_t[idx],
                                                              reduction="sum") / npos
                dist = model.dfl(box)  # (b, 4, A) in cells
                box_loss = (dist - dist_t[idx]).abs().sum(1)[pos].sum() / npos
                loss = cls_loss + box_loss
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
    return model.eval()


def detections(outputs: torch.Tensor) -> list:
    """``mcu_npu.detect``'s detections of each image's output row (float outputs)."""
    return [detect(outputs[i:i + 1].float(), LAYOUT, score=SCORE, iou=IOU,
                   max_boxes=MAX_BOXES) for i in range(len(outputs))]


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    lt = np.maximum(box[:2], boxes[:, :2])
    rb = np.minimum(box[2:], boxes[:, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=1)
    area = np.prod(box[2:] - box[:2])
    areas = np.prod(boxes[:, 2:] - boxes[:, :2], axis=1)
    return inter / (area + areas - inter)


def average_precision(outputs: torch.Tensor, objects: torch.Tensor, iou: float = 0.5) -> float:
    """mAP@``iou`` in percent of a detector's ``outputs`` (N, 4 + classes, A) against the
    ground truth ``objects`` (N, 3, 5): per class, detections of all images by score (ties in
    image order), each matched to the unmatched object of its class it overlaps most when
    that IoU is at least ``iou``; AP the area under the precision-recall curve with
    precision made monotone (VOC 2010 on); the mean over the classes."""
    found = detections(outputs)
    aps = []
    for c in range(len(CLASSES)):
        truth = {i: objects[i][objects[i][:, 0] == c, 1:].numpy().astype(np.float64)
                 for i in range(len(objects))}
        total = sum(len(t) for t in truth.values())
        used = {i: np.zeros(len(t), bool) for i, t in truth.items()}
        dets = [(float(d.scores[k]), i, d.boxes[k].numpy().astype(np.float64))
                for i, d in enumerate(found) for k in range(len(d)) if int(d.classes[k]) == c]
        dets.sort(key=lambda t: -t[0])  # stable: ties stay in image order
        tp = np.zeros(len(dets))
        for r, (_, i, box) in enumerate(dets):
            if len(truth[i]):
                overlaps = _iou(box, truth[i])
                overlaps[used[i]] = -1.0
                best = int(np.argmax(overlaps))
                if overlaps[best] >= iou:
                    used[i][best] = True
                    tp[r] = 1.0
        if total == 0:
            continue
        hits = np.cumsum(tp)
        recall = np.concatenate([[0.0], hits / total, [1.0]])
        precision = np.concatenate([[1.0], hits / np.arange(1, len(dets) + 1), [0.0]])
        precision = np.maximum.accumulate(precision[::-1])[::-1]
        step = np.nonzero(recall[1:] != recall[:-1])[0]
        aps.append(float(np.sum((recall[step + 1] - recall[step]) * precision[step + 1])))
    return 100.0 * float(np.mean(aps))


def split(train: int = 1000, held_out: int = 300):
    """(train canvases, train objects, held-out canvases, held-out objects): training canvases
    of the training split's digits (seed 1), held-out ones of the held-out digits (seed 2)."""
    x, y, xv, yv = data.digits_split()
    return (*canvases(x, y, train, seed=1), *canvases(xv, yv, held_out, seed=2))
