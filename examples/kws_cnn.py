"""A small keyword-spotting CNN on MFCC features (the shape of 1 s of 16 kHz audio).

Input: 1 x 1 x 49 x 10 (49 frames of 10 MFCC coefficients, 20 ms stride); output: 12 logits
(the 10 Speech Commands keywords, "silence" and "unknown"). Three conv + BatchNorm + ReLU
layers, a global average pool and a linear classifier: about 15 k parameters.

The weights are random (deterministic, seed 0): the example shows the compile flow, not a
trained model. Compile it with::

    mcu-npu compile examples/kws_cnn.py:factory --target imxrt700 -o kws.pte
"""

from __future__ import annotations

import torch
import torch.nn as nn

FRAMES, COEFFICIENTS, CLASSES = 49, 10, 12


class KwsCNN(nn.Module):
    def __init__(self, classes: int = CLASSES):
        super().__init__()
        self.features = nn.Sequential(
            # time stride 2: 49 x 10 -> 25 x 10
            nn.Conv2d(1, 16, (5, 3), stride=(2, 1), padding=(2, 1)), nn.BatchNorm2d(16), nn.ReLU(),
            # 25 x 10 -> 13 x 5
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(32, classes)

    def forward(self, mfcc: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.flatten(self.features(mfcc)))


def factory(seed: int = 0):
    """(model in eval mode, example inputs) for ``mcu-npu compile``."""
    torch.manual_seed(seed)
    model = KwsCNN()
    # BatchNorm statistics as one pass over random features would leave them, so the
    # folded conv weights and activations have realistic ranges
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None
            nn.init.uniform_(m.weight, 0.5, 1.0)
            nn.init.normal_(m.bias, 0.5, 0.3)
    with torch.no_grad():
        model.train()(torch.randn(32, 1, FRAMES, COEFFICIENTS))
    model.eval()
    return model, (torch.randn(1, 1, FRAMES, COEFFICIENTS),)


if __name__ == "__main__":
    model, inputs = factory()
    print(model(*inputs).shape, sum(p.numel() for p in model.parameters()), "parameters")
