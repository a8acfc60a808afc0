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

import torch

from mcu_npu.models.trained import data, task
from mcu_npu.models.trained.nets import DigitsCNN

SEED = data.SEED
HELD_OUT_FRACTION = data.HELD_OUT_FRACTION


def split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train images, train labels, held-out images, held-out labels): a fixed stratified split.

    Images are N x 1 x 8 x 8 float32 in [0, 1]; labels are int64.
    """
    return data.digits_split()


def trained_model() -> DigitsCNN:
    """The trained network (float, eval mode); trains on first use in this process
    (``mcu_npu.models.trained``: the benchmarks' and tests' ``digits_cnn``)."""
    model = DigitsCNN()
    model.load_state_dict(task("digits_cnn").model.state_dict())
    return model.eval()


def calibration(n: int = 32) -> list[tuple[torch.Tensor]]:
    """``n`` calibration samples (1 x 1 x 8 x 8 each) from the training split."""
    x, _, _, _ = split()
    return [(image[None],) for image in data.first_of_permutation(x, n, SEED)]


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
