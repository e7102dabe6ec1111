"""Run-time side: region callables and their counters (kept apart from the graph passes)."""

from dynamo_nvf.runtime.stats import STATS, RuntimeStats

__all__ = ["STATS", "RuntimeStats"]
