"""What perf's reports and its acceptance verdicts both read from a result document: the backends,
a workload's timing, ratios and geometric means, and how numbers print.

Its own module so that `perf.report` (which stores and renders the acceptance verdicts) and
`perf.acceptance` (which computes them) import it, not each other.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional

TABLEFMT = "github"


def geomean(values: Iterable[Optional[float]]) -> Optional[float]:
    """Geometric mean of the finite positive values; None when there are none."""
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def timing_of(doc: dict, workload: str) -> str:
    """"gpu" or "step"; files written before the model tier have no timing and are all "gpu"."""
    return ((doc.get("workloads") or {}).get(workload) or {}).get("timing") or "gpu"


def ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    """num/den; None when either is missing; 0/0 is 1.0 (equal), x/0 is inf."""
    if num is None or den is None:
        return None
    if den == 0:
        return 1.0 if num == 0 else math.inf
    return num / den


def backends_of(doc: dict) -> list[str]:
    """Column order: the document's "backends", else first appearance in its results."""
    if doc.get("backends"):
        return list(doc["backends"])
    seen: list[str] = []
    for per_backend in doc["results"].values():
        seen += [b for b in per_backend if b not in seen]
    return seen


def fmt_num(value: Optional[float], digits: int, count: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if count and float(value).is_integer():
        return str(int(value))
    return f"{value:.{digits}f}"


def fmt_ratio(value: Optional[float]) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.2f}x"


#: Environment facts that must be equal for documents to be shards of one run.
SAME_RUN_ENV = ("gpu", "driver", "cuda_runtime", "torch", "nvfuser_direct", "dynamo_nvf", "git_commit", "git_dirty")


def missing_pairs(doc: dict) -> list[str]:
    """'workload / backend' pairs the run declared (config.run_workloads x backends) but has no
    record of: shards not joined, a time budget spent, a killed run's checkpoint."""
    declared = (doc.get("config") or {}).get("run_workloads") or list(doc["results"])
    out = []
    for wl in declared:
        per_backend = doc["results"].get(wl) or {}
        out += [f"{wl} / {b}" for b in backends_of(doc) if b not in per_backend]
    return out
