"""A small CNN classifier for scikit-learn's bundled handwritten digits (8x8 grey images).

Compile it for an NPU target::

    mcu-npu compile examples/digits.py:factory --target imxrt700 -o digits.pte

(``examples/digits.py:calibrated`` also hands the compiler calibration samples.)

``factory()`` trains the network (a few seconds on a laptop CPU, deterministic) and returns
``(model, example_inputs)``. ``calibration()`` gives quantization calibration samples from the
training split and ``held_out()`` the images and labels the network never saw, so the float and
the quantized accuracy can be compared. Nothing is cached on disk; the trained weights are kept
in memory for the rest of the process.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn as nn

SEED = 0
HELD_OUT_FRACTION = 0.2
EPOCHS = 15
BATCH = 64


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


@functools.lru_cache(maxsize=1)
def split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train images, train labels, held-out images, held-out labels): a fixed stratified split.

    Images are N x 1 x 8 x 8 float32 in [0, 1]; labels are int64.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    # reshape (not [:, None]) so the unit channel axis gets a plain contiguous stride: a
    # stride-0/1 channel axis makes torch.export treat the input as channels-last
    images = digits.images.astype(np.float32).reshape(-1, 1, 8, 8) / 16.0
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target, test_size=HELD_OUT_FRACTION, random_state=SEED,
        stratify=digits.target)
    return (torch.from_numpy(x_train), torch.from_numpy(y_train).long(),
            torch.from_numpy(x_test), torch.from_numpy(y_test).long())


@functools.lru_cache(maxsize=1)
def _trained_state() -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # batches this small train fastest (and steadiest) on one thread
    try:
        return _train()
    finally:
        torch.set_num_threads(threads)


def _train() -> dict:
    x, y, _, _ = split()
    torch.manual_seed(SEED)
    model = DigitsCNN()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=1e-2, total_steps=EPOCHS * ((len(x) + BATCH - 1) // BATCH))
    g = torch.Generator().manual_seed(SEED)
    model.train()
    for _ in range(EPOCHS):
        order = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), BATCH):
            idx = order[i:i + BATCH]
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def trained_model() -> DigitsCNN:
    """The trained network (float, eval mode); trains on first use in this process."""
    model = DigitsCNN()
    model.load_state_dict(_trained_state())
    return model.eval()


def calibration(n: int = 32) -> list[tuple[torch.Tensor]]:
    """``n`` calibration samples (1 x 1 x 8 x 8 each) from the training split."""
    x, _, _, _ = split()
    idx = torch.randperm(len(x), generator=torch.Generator().manual_seed(SEED))[:n]
    return [(x[i:i + 1],) for i in idx.tolist()]


def held_out() -> tuple[torch.Tensor, torch.Tensor]:
    """(images N x 1 x 8 x 8, labels N) of the held-out split."""
    _, _, x, y = split()
    return x, y


def accuracy(model, images: torch.Tensor | None = None,
             labels: torch.Tensor | None = None) -> float:
    """Top-1 accuracy of ``model`` (any callable on a batch) on the held-out split by default."""
    if images is None:
        images, labels = held_out()
    with torch.no_grad():
        predicted = model(images).argmax(dim=-1)
    return float((predicted == labels).float().mean())


def factory():
    """(trained model, example inputs) for ``mcu-npu compile examples/digits.py:factory``."""
    return trained_model(), calibration(1)[0]


def calibrated():
    """(trained model, example inputs, calibration samples): ``examples/digits.py:calibrated``
    compiles with quantization ranges from 32 training images instead of the example alone."""
    return trained_model(), calibration(1)[0], calibration()


if __name__ == "__main__":
    import time

    start = time.perf_counter()
    model = trained_model()
    print(f"trained in {time.perf_counter() - start:.1f} s; "
          f"held-out accuracy {accuracy(model) * 100:.2f}%")
