"""How each activation of a calibrated (prepared) PT2E graph got its range, read from its
observers before ``convert_pt2e`` removes them: the records the report reads."""

from __future__ import annotations

from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.observer import FixedQParamsObserver, MinMaxObserver

from ...graph.ids import node_id
from .observer import CalibrationObserver

CALIBRATION_KEY = "mcu_npu_calibration"
"""Key in the quantized reference's ``meta``: ``calibration_records`` of its calibration."""

QAT = "qat"
"""The method of a fake-quantized activation (its moving-average min / max)."""


def observer_method(observer) -> str | None:
    """What set the range of an activation observed by ``observer``; None for what is not
    an activation range (weights, derived biases)."""
    from ..qspecs import MaskedScoresObserver

    if isinstance(observer, CalibrationObserver):
        return observer.record["method"] if observer.record else None
    if isinstance(observer, MaskedScoresObserver):
        return "masked-scores"
    if isinstance(observer, FixedQParamsObserver) or "FixedQParams" in type(observer).__name__:
        return "fixed"
    if type(observer) is MinMaxObserver:
        return "minmax"
    if "FakeQuantize" in type(observer).__name__:
        return QAT
    if "Histogram" in type(observer).__name__:
        return "histogram-observer"
    return None


def calibration_records(prepared: GraphModule) -> dict[str, dict]:
    """Node id (``graph.ids.node_id``, else the node's name) of each observed activation ->
    ``{"method", "bits"}`` and, for a ``CalibrationObserver``, its ``range`` and the mean
    squared error of that range (``mse``) and of MinMax's (``minmax_mse``) on the
    calibration data. An activation observed twice keeps its first (output) observer."""
    records: dict[str, dict] = {}
    for node in prepared.graph.nodes:
        if node.op != "call_module" or not node.args:
            continue
        source = node.args[0]
        if not isinstance(source, Node) or source.op not in ("call_function", "placeholder"):
            continue
        observer = prepared.get_submodule(node.target)
        method = observer_method(observer)
        key = node_id(source) or source.name
        if method is None or key in records:
            continue
        record = {"method": method, "bits": _bits(observer)}
        if isinstance(observer, CalibrationObserver):
            record.update({k: observer.record[k] for k in ("range", "mse", "minmax_mse")})
        records[key] = record
    return records


def _bits(observer) -> int:
    dtype = getattr(observer, "dtype", None)
    return getattr(dtype, "itemsize", 1) * 8
