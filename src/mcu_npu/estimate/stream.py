"""The cost of a program run as a stream: one call per frame, each call's estimated time
against the frame period (does the NPU + CPU work of a call fit, with how much to spare)
and the state it keeps between calls."""

from __future__ import annotations

from ..errors import ConfigError


def check_frame_period(frame_period_ms) -> float | None:
    """``frame_period_ms`` as a positive float (None: not given); ConfigError otherwise."""
    if frame_period_ms is None:
        return None
    if isinstance(frame_period_ms, bool) or not isinstance(frame_period_ms, (int, float)) \
            or not frame_period_ms > 0 or frame_period_ms == float("inf"):
        raise ConfigError(f"frame_period_ms must be a positive number of milliseconds (the "
                          f"time between two calls, e.g. 10 for 10 ms audio frames), got "
                          f"{frame_period_ms!r}")
    return float(frame_period_ms)


def stream_budget(report, frame_period_ms: float | None) -> dict:
    """The report's ``stream``: the estimated time of one call (``per_call_us``, NPU and
    CPU), the state kept between calls (``state_bytes``) and, given a frame period, the
    real-time margin (``margin_us``: the period less a call's time; ``load``: a call's share
    of the period; ``real_time``: whether a call fits its period). Empty for a stateless
    program compiled without a frame period."""
    state = sum(t["bytes"] for t in report.state)
    if frame_period_ms is None and not report.state:
        return {}
    latency = report.latency
    out = {"per_call_us": latency.get("latency_us"), "npu_us": latency.get("npu_us"),
           "cpu_us": latency.get("cpu_us"), "state_bytes": state,
           "state_tensors": len(report.state)}
    if frame_period_ms is not None and out["per_call_us"] is not None:
        period_us = frame_period_ms * 1000
        out.update(frame_period_ms=frame_period_ms,
                   margin_us=round(period_us - out["per_call_us"], 3),
                   load=round(out["per_call_us"] / period_us, 6),
                   real_time=out["per_call_us"] <= period_us)
    return out
