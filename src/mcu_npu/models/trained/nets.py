"""The small networks trained here: a CNN, a GRU and a ViT on 8x8 digits, a 1-D CNN on
GunPoint series."""

from __future__ import annotations

import torch
import torch.nn as nn


class DigitsCNN(nn.Module):
    """conv 16 -> conv 32 -> max pool -> conv 32 -> global average pool -> linear 10."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(32, classes)

    def forward(self, x):
        return self.classifier(self.flatten(self.features(x)))


class DigitsGRU(nn.Module):
    """The image's 8 rows as a sequence of 8 features -> GRU 32 -> linear 10 on the last
    step."""

    def __init__(self, hidden: int = 32, classes: int = 10):
        super().__init__()
        self.gru = nn.GRU(8, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.fc(out[:, -1])


class DigitsViT(nn.Module):
    """A vision transformer on 8x8 images: 2x2 patches (a stride-2 convolution) -> 16 tokens
    of width 32 plus a learned position embedding -> one pre-norm encoder layer (4 heads,
    feed-forward 64, GELU) -> layer norm -> mean over tokens -> linear 10."""

    def __init__(self, width: int = 32, heads: int = 4, layers: int = 1, classes: int = 10):
        super().__init__()
        self.patches = nn.Conv2d(1, width, 2, stride=2)
        self.position = nn.Parameter(torch.zeros(1, 16, width))
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=2 * width, dropout=0.0,
                                           activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        tokens = self.patches(x).flatten(2).transpose(1, 2) + self.position
        return self.head(self.norm(self.encoder(tokens)).mean(1))


class SeriesCNN(nn.Module):
    """A fully convolutional 1-D classifier (the FCN shape of time-series classification):
    conv 16 (k7) -> conv 32 (k5) -> conv 32 (k3), each with batch norm and ReLU, max pools
    between -> global average pool -> linear."""

    def __init__(self, channels: int = 1, classes: int = 2):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(channels, 16, 7, padding=3), nn.BatchNorm1d(16), nn.ReLU(),
            nn.MaxPool1d(2),
            nn.Conv1d(16, 32, 5, padding=2), nn.BatchNorm1d(32), nn.ReLU(),
            nn.MaxPool1d(2),
            nn.Conv1d(32, 32, 3, padding=1), nn.BatchNorm1d(32), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1),
        )
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(32, classes)

    def forward(self, x):
        return self.classifier(self.flatten(self.features(x)))
