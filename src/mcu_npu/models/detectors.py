"""Object-detector heads as people write them, on small backbones, for model-level tests:
their box decoding is in the graph, as exported detectors have it.

* ``yolov8``: anchor-free (distribution focal loss: a softmax over 16 bins per side and a
  fixed 1x1 convolution with ``arange`` weights), an anchor grid made in ``forward`` from
  ``arange`` / ``meshgrid`` of the feature shapes, strides read from a tensor
  (``torch.full`` of ``stride[i].item()``), ``dist2bbox`` to centre and size, class
  ``sigmoid``; boxes and scores concatenated into one ``(1, 4 + classes, anchors)`` output;
* ``yolov8_seg``: the same with a mask-coefficient branch and a prototype branch
  (upsampled), outputs ``(detections with coefficients, prototypes)``;
* ``yolov8_pose``: the same with a keypoint branch (x, y decoded on the anchor grid in
  pixels, visibility sigmoid);
* ``yolov5``: anchor-based, per level ``sigmoid`` then ``(xy * 2 - 0.5 + grid) * stride``
  and ``(wh * 2) ** 2 * anchor``, levels concatenated into ``(1, anchors, 5 + classes)``;
* ``ssd``: raw box offsets and class logits of three levels, each ``permute``d and
  flattened, concatenated (RetinaNet's form);
* ``fomo``: a centroid map, a 1x1 convolution and a softmax over classes per cell.

Each factory returns ``(model.eval(), example_inputs)`` with deterministic random weights.
"""

from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["DETECTORS", "yolov8", "yolov8_seg", "yolov8_pose", "yolov5", "ssd", "fomo",
           "yolov8_160", "yolov8_224", "yolov8_320"]


def _conv(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.ReLU())


class Backbone(nn.Module):
    """Three feature maps, at strides 8, 16 and 32."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.stem = nn.Sequential(_conv(3, c, 2), _conv(c, c, 2), _conv(c, c, 2))
        self.p4, self.p5 = _conv(c, c, 2), _conv(c, c, 2)

    def forward(self, x):
        p3 = self.stem(x)
        p4 = self.p4(p3)
        return [p3, p4, self.p5(p4)]


def make_anchors(feats, strides, offset: float = 0.5):
    """Anchor centres (in cells) and their strides, from the feature maps' shapes."""
    points, stride_tensor = [], []
    for i, f in enumerate(feats):
        h, w = f.shape[2:]
        sx = torch.arange(w, dtype=torch.float32) + offset
        sy = torch.arange(h, dtype=torch.float32) + offset
        sy, sx = torch.meshgrid(sy, sx, indexing="ij")
        points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_tensor.append(torch.full((h * w, 1), strides[i].item()))
    return torch.cat(points), torch.cat(stride_tensor)


def dist2bbox(distance, anchor_points, dim: int = 1):
    """(left, top, right, bottom) distances to centre-and-size boxes."""
    lt, rb = distance.chunk(2, dim)
    x1y1, x2y2 = anchor_points - lt, anchor_points + rb
    return torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), dim)


class DFL(nn.Module):
    """Distribution focal loss decoding: the expected bin of a softmax over ``bins``."""

    def __init__(self, bins: int = 16):
        super().__init__()
        self.conv = nn.Conv2d(bins, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(bins, dtype=torch.float32).view(1, bins, 1, 1)
        self.bins = bins

    def forward(self, x):
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.bins, a).transpose(2, 1).softmax(1)).view(b, 4, a)


class Yolov8(nn.Module):
    """YOLOv8-style anchor-free detector (module docstring); ``masks`` > 0 adds the
    segmentation branch, ``keypoints`` > 0 the pose branch."""

    def __init__(self, classes: int = 3, c: int = 8, bins: int = 16, masks: int = 0,
                 keypoints: int = 0):
        super().__init__()
        self.classes, self.bins, self.masks, self.keypoints = classes, bins, masks, keypoints
        self.backbone = Backbone(c)
        self.box = nn.ModuleList(nn.Sequential(_conv(c, c), nn.Conv2d(c, 4 * bins, 1))
                                 for _ in range(3))
        self.cls = nn.ModuleList(nn.Sequential(_conv(c, c), nn.Conv2d(c, classes, 1))
                                 for _ in range(3))
        self.dfl = DFL(bins)
        self.register_buffer("stride", torch.tensor([8.0, 16.0, 32.0]))
        if masks:
            self.coef = nn.ModuleList(nn.Conv2d(c, masks, 1) for _ in range(3))
            self.proto = nn.Sequential(_conv(c, c), nn.Upsample(scale_factor=2),
                                       nn.Conv2d(c, masks, 1))
        if keypoints:
            self.kpt = nn.ModuleList(nn.Conv2d(c, 3 * keypoints, 1) for _ in range(3))

    def forward(self, x):
        feats = self.backbone(x)
        b = x.shape[0]
        heads = [torch.cat((self.box[i](f), self.cls[i](f)), 1) for i, f in enumerate(feats)]
        anchors, strides = (t.transpose(0, 1) for t in make_anchors(heads, self.stride))
        flat = torch.cat([h.view(b, 4 * self.bins + self.classes, -1) for h in heads], 2)
        box, cls = flat.split((4 * self.bins, self.classes), 1)
        boxes = dist2bbox(self.dfl(box), anchors.unsqueeze(0)) * strides
        y = torch.cat((boxes, cls.sigmoid()), 1)
        if self.masks:
            coef = torch.cat([self.coef[i](f).view(b, self.masks, -1)
                              for i, f in enumerate(feats)], 2)
            return torch.cat((y, coef), 1), self.proto(feats[0])
        if self.keypoints:
            k = torch.cat([self.kpt[i](f).view(b, 3 * self.keypoints, -1)
                           for i, f in enumerate(feats)], 2)
            k = k.view(b, self.keypoints, 3, -1)
            xy = (k[:, :, :2] * 2.0 + (anchors - 0.5)) * strides
            kpts = torch.cat((xy, k[:, :, 2:].sigmoid()), 2).view(b, 3 * self.keypoints, -1)
            return torch.cat((y, kpts), 1)
        return y


class Yolov5(nn.Module):
    """YOLOv5-style anchor-based detector: three anchors per cell and level."""

    def __init__(self, classes: int = 3, c: int = 8):
        super().__init__()
        self.no, self.na = 5 + classes, 3
        self.backbone = Backbone(c)
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for _ in range(3))
        self.register_buffer("stride", torch.tensor([8.0, 16.0, 32.0]))
        anchors = torch.tensor([[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119],
                                [116, 90, 156, 198, 373, 326]], dtype=torch.float32)
        self.register_buffer("anchors", anchors.view(3, 3, 2))

    def forward(self, x):
        out = []
        for i, f in enumerate(self.backbone(x)):
            p = self.m[i](f)
            b, _, h, w = p.shape
            p = p.view(b, self.na, self.no, h, w).permute(0, 1, 3, 4, 2).sigmoid()
            yv, xv = torch.meshgrid(torch.arange(h, dtype=torch.float32),
                                    torch.arange(w, dtype=torch.float32), indexing="ij")
            grid = torch.stack((xv, yv), 2).view(1, 1, h, w, 2) - 0.5
            anchor_grid = (self.anchors[i] * 1.0).view(1, self.na, 1, 1, 2)
            xy, wh, conf = p.split((2, 2, self.no - 4), 4)
            xy = (xy * 2 + grid) * self.stride[i]
            wh = (wh * 2) ** 2 * anchor_grid
            out.append(torch.cat((xy, wh, conf), 4).view(b, -1, self.no))
        return torch.cat(out, 1)


class Ssd(nn.Module):
    """SSD / RetinaNet-style head: raw outputs of three levels, concatenated."""

    def __init__(self, classes: int = 4, c: int = 8, anchors: int = 3):
        super().__init__()
        self.classes, self.anchors = classes, anchors
        self.backbone = Backbone(c)
        self.loc = nn.ModuleList(nn.Conv2d(c, 4 * anchors, 3, padding=1) for _ in range(3))
        self.conf = nn.ModuleList(nn.Conv2d(c, classes * anchors, 3, padding=1)
                                  for _ in range(3))

    def forward(self, x):
        feats = self.backbone(x)
        b = x.shape[0]
        loc = torch.cat([self.loc[i](f).permute(0, 2, 3, 1).reshape(b, -1, 4)
                         for i, f in enumerate(feats)], 1)
        conf = torch.cat([self.conf[i](f).permute(0, 2, 3, 1).reshape(b, -1, self.classes)
                          for i, f in enumerate(feats)], 1)
        return loc, conf


class Fomo(nn.Module):
    """FOMO-style centroid net: a map at stride 8, a softmax over classes per cell."""

    def __init__(self, classes: int = 3, c: int = 8):
        super().__init__()
        self.features = nn.Sequential(_conv(3, c, 2), _conv(c, c, 2), _conv(c, c, 2),
                                      _conv(c, c))
        self.head = nn.Conv2d(c, classes + 1, 1)

    def forward(self, x):
        return self.head(self.features(x)).softmax(1)


def _made(cls, size: int, seed: int, **kwargs):
    torch.manual_seed(seed)
    return cls(**kwargs).eval(), (torch.randn(1, 3, size, size),)


def yolov8(size: int = 96, seed: int = 0):
    return _made(Yolov8, size, seed)


def yolov8_seg(size: int = 96, seed: int = 0):
    return _made(Yolov8, size, seed, masks=4)


def yolov8_pose(size: int = 96, seed: int = 0):
    return _made(Yolov8, size, seed, classes=1, keypoints=4)


def yolov5(size: int = 96, seed: int = 0):
    return _made(Yolov5, size, seed)


def ssd(size: int = 96, seed: int = 0):
    return _made(Ssd, size, seed)


def fomo(size: int = 96, seed: int = 0):
    return _made(Fomo, size, seed)


DETECTORS = {"yolov8": yolov8, "yolov8_seg": yolov8_seg, "yolov8_pose": yolov8_pose,
             "yolov5": yolov5, "ssd": ssd, "fomo": fomo}


def yolov8_160():
    """``yolov8`` at a 160x160 input, as a factory ``compare`` can name
    (``"mcu_npu.models.detectors:yolov8_160"``)."""
    return yolov8(160)


def yolov8_224():
    """``yolov8`` at a 224x224 input (a factory, as ``yolov8_160``)."""
    return yolov8(224)


def yolov8_320():
    """``yolov8`` at a 320x320 input (a factory, as ``yolov8_160``)."""
    return yolov8(320)
