"""Serialize: the report stored in the Edge program as named data, with room for what is
measured once the program exists, and the program serialized to ``.pte`` bytes."""

from __future__ import annotations

from ..errors import stage
from ..report import REPORT_KEY, REPORT_SLACK, Report, stored_report
from ..report.layers import stored_size


def store_report(edge, report: Report, report_slack: int = 0, layers: bool = False) -> bytes:
    """The report as stored in ``edge`` (``report.stored``): ``REPORT_SLACK`` plus
    ``report_slack`` bytes of room, and room for the per-layer rows when ``layers``."""
    with stage("writing the compile report"):
        slack = REPORT_SLACK + report_slack
        if layers:
            slack += stored_size(report.ops)
        stored = stored_report(report, slack)
        edge._named_data_store.add_named_data(REPORT_KEY, stored)
    return stored


def to_executorch(edge) -> bytes:
    """Serialize an Edge program; CPU-side quantize/dequantize need the quantized kernels'
    out variants registered first."""
    with stage("serializing the ExecuTorch program"):
        import executorch.kernels.quantized  # noqa: F401  (registers quantized_decomposed.*.out)

        return bytes(edge.to_executorch().buffer)
