"""``calibration.gathered.gathered_min_max``: the MinMax observers end with the buffers their
own forward gives on the same runs, bit for bit, and observe an unchanged tensor once."""

from __future__ import annotations

import torch
from torchao.quantization.pt2e.observer import MinMaxObserver, PerChannelMinMaxObserver

from mcu_npu.quantization.calibration.gathered import gathered_min_max
from mcu_npu.quantization.calibration.observer import CalibrationObserver


class _Observed(torch.nn.Module):
    """A weight observed per channel and per tensor, activations per tensor (one of them
    empty), and a subclass of MinMaxObserver that must observe as it always does."""

    def __init__(self, dtype=torch.float64):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(6, 5, dtype=dtype))
        self.w_channel = PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8,
                                                  qscheme=torch.per_channel_symmetric)
        self.w_tensor = MinMaxObserver(dtype=torch.qint8)
        self.act = MinMaxObserver()
        self.empty = MinMaxObserver()
        self.sub = CalibrationObserver(method="minmax")
        self.to(dtype)

    def forward(self, x):
        w = self.w_tensor(self.w_channel(self.weight))
        y = self.act(x @ w.t())
        self.empty(y[:, :0])
        return self.sub(y * 2)


def _buffers(m: torch.nn.Module) -> dict:
    return {k: v.clone() for k, v in m.state_dict().items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
        and torch.equal(torch.nan_to_num(a[k], nan=7.0), torch.nan_to_num(b[k], nan=7.0))
        and torch.equal(a[k].isnan(), b[k].isnan()) for k in a)


def _runs(nan_at: int | None = None) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    runs = [torch.randn(4, 5, generator=g, dtype=torch.float64) * (i + 1) for i in range(9)]
    if nan_at is not None:
        runs[nan_at][1, 2] = float("nan")
    return runs


def _observe(runs, gathered: bool, weight_change_at: int | None = None) -> dict:
    torch.manual_seed(0)
    m = _Observed()
    with torch.no_grad():
        ctx = gathered_min_max(m) if gathered else torch.no_grad()
        with ctx:
            for i, x in enumerate(runs):
                if i == weight_change_at:
                    m.weight.mul_(3.0)  # in place: a new version of the same tensor
                m(x)
    return _buffers(m)


def test_gathered_buffers_equal_the_observers_own():
    assert _same(_observe(_runs(), True), _observe(_runs(), False))


def test_a_nan_propagates_as_in_the_observers_own():
    got, want = _observe(_runs(nan_at=4), True), _observe(_runs(nan_at=4), False)
    assert want["act.min_val"].isnan()
    assert _same(got, want)


def test_a_weight_changed_in_place_is_observed_again():
    got = _observe(_runs(), True, weight_change_at=5)
    assert _same(got, _observe(_runs(), False, weight_change_at=5))
    assert not _same(got, _observe(_runs(), True))


def test_an_unchanged_weight_is_observed_once():
    torch.manual_seed(0)
    m = _Observed()
    calls = []
    original = PerChannelMinMaxObserver._forward
    PerChannelMinMaxObserver._forward = lambda self, x: (calls.append(1), original(self, x))[1]
    try:
        with torch.no_grad(), gathered_min_max(m):
            for x in _runs():
                m(x)
    finally:
        PerChannelMinMaxObserver._forward = original
    assert len(calls) == 1
    assert "forward" not in m.w_channel.__dict__ and "forward" not in m.act.__dict__


def test_an_exception_restores_the_observers_and_folds_nothing():
    torch.manual_seed(0)
    m = _Observed()
    before = _buffers(m)
    try:
        with torch.no_grad(), gathered_min_max(m):
            m(_runs()[0])
            raise RuntimeError("stop")
    except RuntimeError:
        pass
    after = _buffers(m)
    assert torch.equal(after["act.min_val"], before["act.min_val"])
    assert "forward" not in m.act.__dict__
