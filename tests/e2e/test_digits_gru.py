"""A GRU classifier on scikit-learn's digits (8 rows as a sequence of 8 features), trained
here: PTQ accuracy of the host-run .pte is within 2 points of float, and a few epochs of QAT
from the PTQ starting point are at least as accurate as PTQ."""

from __future__ import annotations

import pytest
import torch

import mcu_npu
from mcu_npu.models.trained.nets import DigitsGRU
from helpers import assert_loads_in_executorch, fit

pytestmark = pytest.mark.slow


def digits():
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    return (x[:1400], y[:1400]), (x[1400:], y[1400:])


def train(model, x, y, epochs, lr, batch=1):
    fit(model, x, y, torch.optim.Adam(model.parameters(), lr=lr), epochs, batch)


BATCH = 16  # the compiled program's batch size


def accuracy(fn, x, y) -> float:
    n = len(x) // BATCH * BATCH
    with torch.no_grad():
        hits = sum(int((fn(x[i:i + BATCH]).argmax(1) == y[i:i + BATCH]).sum())
                   for i in range(0, n, BATCH))
    return 100.0 * hits / n


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    (xt, yt), held_out = digits()
    model = DigitsGRU()
    train(model, xt, yt, epochs=12, lr=1e-2, batch=32)
    return model.eval(), (xt, yt), held_out


def test_ptq_and_qat_accuracy_from_the_pte(trained):
    model, (xt, yt), (xv, yv) = trained
    float_acc = accuracy(model, xv, yv)
    calibration = [(xt[i:i + BATCH],) for i in range(0, 8 * BATCH, BATCH)]
    ptq = mcu_npu.compile(model, calibration[0], calibration=calibration,
                          npu_compiler="reference")
    ptq_acc = accuracy(lambda x: ptq.run(x)[0], xv, yv)
    assert_loads_in_executorch(ptq.buffer, calibration[0], ptq.run(*calibration[0]))
    assert float_acc >= 90.0
    assert ptq_acc >= float_acc - 2.0, (float_acc, ptq_acc)

    def qat_train(prepared):
        train(prepared, xt, yt, epochs=2, lr=5e-4, batch=BATCH)

    qat = mcu_npu.compile(model, calibration[0], calibration=calibration,
                          npu_compiler="reference", train_fn=qat_train)
    qat_acc = accuracy(lambda x: qat.run(x)[0], xv, yv)
    assert_loads_in_executorch(qat.buffer, calibration[0], qat.run(*calibration[0]))
    print(f"float {float_acc:.1f}%  PTQ {ptq_acc:.1f}%  QAT {qat_acc:.1f}%")
    assert qat.report.summary["ops_on_cpu"] == 0
    assert qat_acc >= ptq_acc, (ptq_acc, qat_acc)
