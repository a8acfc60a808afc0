"""Deterministic training: one thread, deterministic algorithms, a fixed seed, a fixed
number of epochs. The same seed gives the same weights on any x86-64 host up to the last
bits of float kernels (vectorised reductions may differ between CPUs), so an accuracy
measured on these models is a figure with the resolution of one held-out sample, not a
float-precision value."""

from __future__ import annotations

import contextlib
from typing import Callable

import torch
import torch.nn as nn


@contextlib.contextmanager
def deterministic(seed: int):
    """Train inside: one intra-op thread, ``torch.use_deterministic_algorithms``, the global
    RNG seeded with ``seed`` (restored after, with the thread count and the algorithm mode)."""
    threads = torch.get_num_threads()
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            yield
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
        torch.set_num_threads(threads)


def fit(build: Callable[[], nn.Module], x: torch.Tensor, y: torch.Tensor, *, epochs: int,
        lr: float, batch: int = 64, seed: int = 0, weight_decay: float = 0.0) -> dict:
    """Train ``build()`` (constructed after seeding) with Adam and a one-cycle learning rate on
    cross-entropy over shuffled mini-batches (seeded order, last partial batch kept); returns
    the trained state dict."""
    with deterministic(seed):
        model = build()
        opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=lr, total_steps=epochs * ((len(x) + batch - 1) // batch))
        order_rng = torch.Generator().manual_seed(seed)
        model.train()
        for _ in range(epochs):
            order = torch.randperm(len(x), generator=order_rng)
            for i in range(0, len(x), batch):
                idx = order[i:i + batch]
                loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
        return {k: v.detach().clone() for k, v in model.state_dict().items()}
