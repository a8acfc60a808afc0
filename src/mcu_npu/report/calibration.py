"""The report's calibration section: the calibration method asked for, how many activation
tensors each method set, and for each tensor whose error was measured, the mean squared
quantization error of its range beside MinMax's (``gain_db``: how much lower, in dB).

Built from the quantizer's records (``quantization.calibration.records``); plain values, so
the report's JSON holds it as it is."""

from __future__ import annotations

import math

SHOWN = 5
"""Tensors named in the text: the largest gains over MinMax."""


def calibration_section(method: str, records: dict[str, dict],
                        names: dict[str, str] | None = None, check: dict | None = None,
                        bias: dict | None = None) -> dict:
    """``{"method", "counts": {method: tensors}, "tensors": [...]}``, plus ``check``: auto's
    whole-model verdict (``quantization.calibration.whole_model``) where it ran, and
    ``bias_correction``: the bias correction's (``quantization.calibration.bias_correction``)
    where it was asked for. Each tensor
    row holds ``node`` (the report's op producing it, by ``names``: ATen node id -> op node;
    else the id, or the name of a program input), ``method``, ``bits`` and, where measured,
    ``mse``, ``minmax_mse``, ``gain_db`` and ``range``."""
    counts: dict[str, int] = {}
    tensors = []
    for ident, record in records.items():
        counts[record["method"]] = counts.get(record["method"], 0) + 1
        row = {"node": (names or {}).get(ident, ident), **record}
        if "mse" in record:
            row["gain_db"] = gain_db(record["mse"], record["minmax_mse"])
        tensors.append(row)
    section = {"method": method, "counts": dict(sorted(counts.items())), "tensors": tensors}
    if check:
        section["check"] = dict(check)
    if bias:
        section["bias_correction"] = dict(bias)
    return section


def gain_db(error: float, minmax_error: float) -> float:
    """How much lower ``error`` is than ``minmax_error``, in dB (0 when both are 0)."""
    if error <= 0 or minmax_error <= 0:
        return 0.0 if error == minmax_error else (math.inf if error <= 0 else -math.inf)
    return round(10.0 * math.log10(minmax_error / error), 3)


def calibration_summary(section: dict) -> dict:
    """What ``report.summary`` shows of the section: the method asked and the counts."""
    summary = {"method": section.get("method"), "counts": dict(section.get("counts", {}))}
    if section.get("check"):
        summary["kept"] = section["check"]["kept"]
    if section.get("bias_correction"):
        summary["bias_correction"] = section["bias_correction"]["kept"]
    return summary


def calibration_lines(section: dict) -> list[str]:
    """The text: one line of counts, then the tensors whose range gained most over MinMax."""
    if not section:
        return []
    counts = section.get("counts", {})
    total = sum(counts.values())
    parts = ", ".join(f"{n} {name}" for name, n in sorted(counts.items(), key=lambda c: -c[1]))
    lines = [f"calibration {section.get('method')}: {total} activation tensor(s): {parts}"]
    lines += _check_lines(section.get("check"))
    lines += _bias_lines(section.get("bias_correction"))
    moved = sorted((t for t in section.get("tensors", [])
                    if t.get("gain_db") and t["method"] != "minmax"),
                   key=lambda t: -t["gain_db"])
    for t in moved[:SHOWN]:
        side = "below" if t["gain_db"] > 0 else "above"
        lines.append(f"  {t['node']}: {t['method']} range {_range(t)}, quantization error "
                     f"{abs(t['gain_db']):.2f} dB {side} MinMax's")
    if len(moved) > SHOWN:
        lines.append(f"  and {len(moved) - SHOWN} more (report.calibration)")
    return lines


def _check_lines(check: dict | None) -> list[str]:
    """Auto's whole-model verdict: which ranges were kept and the SQNR each gave."""
    if not check:
        return []
    figures = (f"output SQNR on {check['samples']} calibration sample(s) "
               f"{check['auto_sqnr_db']:.2f} dB with auto's per-tensor ranges, "
               f"{check['minmax_sqnr_db']:.2f} dB with MinMax's")
    if check["kept"] == "auto":
        return [f"  auto's ranges kept: {figures}"]
    return [f"  auto's ranges turned down, MinMax everywhere: {figures}"]


def _bias_lines(verdict: dict | None) -> list[str]:
    """The bias correction's verdict and the SQNR with and without it."""
    if not verdict:
        return []
    figures = (f"output SQNR on {verdict['samples']} calibration sample(s) "
               f"{verdict['after_db']:.2f} dB corrected, {verdict['before_db']:.2f} dB not")
    if verdict["kept"]:
        return [f"  biases corrected in {verdict['layers']} layer(s): {figures}"]
    return [f"  bias correction turned down ({verdict['layers']} layer(s)): {figures}"]


def _range(t: dict) -> str:
    lo, hi = t.get("range", (0.0, 0.0))
    return f"[{lo:.4g}, {hi:.4g}]"
