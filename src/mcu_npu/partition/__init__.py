"""Operator support against a target, Q/DQ cluster recognition, the partitioner."""

from .partitioner import EthosUPartitioner, NeutronPartitioner, NpuPartitioner
from .support import SupportAnalysis, Verdict, VerdictCategory

__all__ = ["NpuPartitioner", "NeutronPartitioner", "EthosUPartitioner", "SupportAnalysis", "Verdict",
           "VerdictCategory"]
