"""Operator support against a target, Q/DQ cluster recognition, the partitioner."""

from .partitioner import NeutronPartitioner
from .support import SupportAnalysis, Verdict

__all__ = ["NeutronPartitioner", "SupportAnalysis", "Verdict"]
