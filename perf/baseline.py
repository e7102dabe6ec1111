"""Regression check of a run against a stored result file (same schema).

A (workload, backend) regresses when its new GPU time exceeds
``baseline * (1 + threshold)`` and grows by at least ``min_delta_us`` (1 us: the event-timer floor).  ``metric`` picks another number of the same records instead:
``host_us`` (host time per call on tiny inputs, where a wrapper's cost shows), ``kernels``
(kernel launches per call, exact: one more kernel per call regresses, whatever the threshold),
and for model workloads ``step_ms`` (step time as a user sees it), ``enqueue_ms`` (host enqueue
per step) and ``kernel_ms``.  Each metric has its own default threshold and minimum delta
(``METRIC_DEFAULTS``): host times are gated only with a generous threshold (25%) and a floor,
because the host of a shared machine is noisier than its GPU.  GPU time and step time are
re-measured; a metric the new run did not measure (``--no-host``) is reported, not flagged.  GPU timings are noisy, so a suspect is not flagged
straight away when a ``remeasure`` callback is given: the pair is measured again
``repeats`` times, the re-measurements are reduced (min by default: the question is
"can it still run as fast as the baseline?") and only a regression that persists is
flagged.  Comparing two stored files has no callback, so suspects are flagged as is.

A pair that errors now but had a time in the baseline counts as a regression too: a
backend that stopped working must not pass the check.  So does a pair whose accuracy check (the
zoo's, against fp64) fails where the baseline's passed, whatever its time.

Backends can be compared across names: ``pairs=[("nvf_untrimmed", "nvf_bookend")]``
checks the new run's nvf_untrimmed against the baseline's nvf_bookend.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence

from tabulate import tabulate

from .figures import TABLEFMT, backends_of, fmt_num, fmt_ratio

Remeasure = Callable[[str, str, int], Sequence[float]]
"""remeasure(workload, backend, repeats) -> that many fresh GPU times (us); empty on failure."""

DEFAULT_THRESHOLD = 0.10
#: Time changes smaller than this (us) are never flagged: a call that launches no kernel measures
#: ~1.5 us of CUDA-event overhead, and 0.2 us more is 13% of it (seen on an H200, lone_reshape).
DEFAULT_MIN_DELTA_US = 1.0
METRIC = "gpu_us"
METRICS = {
    "gpu_us": "GPU time, us",
    "host_us": "host time on tiny inputs, us",
    "kernels": "kernels per call",
    "step_ms": "step time as a user sees it, ms",
    "enqueue_ms": "host enqueue per step, ms",
    "kernel_ms": "GPU kernel time per step, ms",
}
#: Microseconds per unit of each time metric (min_delta_us is in us whatever the metric's unit).
US_PER_UNIT = {"gpu_us": 1.0, "host_us": 1.0, "step_ms": 1e3, "enqueue_ms": 1e3, "kernel_ms": 1e3}
#: (threshold, min_delta_us) used when the caller gives none.  Host metrics: generous, because a
#: batch of host calls on a shared machine varies by 10-20% between runs where GPU time does not.
METRIC_DEFAULTS: dict[str, tuple[float, float]] = {
    "gpu_us": (DEFAULT_THRESHOLD, DEFAULT_MIN_DELTA_US),
    "kernels": (DEFAULT_THRESHOLD, 0.0),
    "host_us": (0.25, 2.0),
    "step_ms": (DEFAULT_THRESHOLD, 20.0),
    "enqueue_ms": (0.25, 20.0),
    "kernel_ms": (DEFAULT_THRESHOLD, 2.0),
}
#: Metrics a live run can re-measure before flagging (Runner.remeasure).
REMEASURABLE = frozenset({"gpu_us", "step_ms"})

OK = "ok"
FASTER = "faster"
REGRESSION = "REGRESSION"
NOISE = "noise (cleared on re-measure)"
NEW_ERROR = "REGRESSION (now errors)"
FIXED = "fixed (baseline errored)"
BOTH_ERROR = "error (in both)"
NO_BASELINE = "no baseline"
NOT_MEASURED = "not measured in this run"

FAILING = frozenset({REGRESSION, NEW_ERROR})

_REDUCERS: dict[str, Callable[[Sequence[float]], float]] = {"min": min, "median": statistics.median}


@dataclass
class Row:
    """One compared pair."""

    workload: str
    backend: str
    baseline_backend: str
    baseline_us: Optional[float]
    new_us: Optional[float]
    status: str
    remeasured: list[float] = field(default_factory=list)
    final_us: Optional[float] = None  # value the verdict used (re-measured if any)
    note: str = ""

    @property
    def ratio(self) -> Optional[float]:
        used = self.final_us if self.final_us is not None else self.new_us
        if used is None or not self.baseline_us:
            return None
        return used / self.baseline_us


@dataclass
class Comparison:
    rows: list[Row]
    threshold: float
    pairs: list[tuple[str, str]]
    warnings: list[str] = field(default_factory=list)
    metric: str = METRIC
    min_delta_us: float = DEFAULT_MIN_DELTA_US

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.status in FAILING]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0

    def to_json(self) -> dict:
        return {
            "threshold": self.threshold,
            "metric": self.metric,
            "min_delta_us": self.min_delta_us,
            "pairs": [list(p) for p in self.pairs],
            "warnings": self.warnings,
            "regressions": len(self.regressions),
            "rows": [dict(asdict(r), ratio=r.ratio) for r in self.rows],
        }


def backend_pairs(
    new_backends: Sequence[str],
    base_backends: Sequence[str],
    compare_backend: Optional[str] = None,
    baseline_backend: Optional[str] = None,
) -> list[tuple[str, str]]:
    """(new backend, baseline backend) pairs to check.

    Neither flag: every backend present in both, each against itself.  One or both: that
    single pair (a missing side defaults to the other's name).  ValueError when a named
    backend is absent from its side.
    """
    if compare_backend is None and baseline_backend is None:
        pairs = [(b, b) for b in new_backends if b in base_backends]
        if not pairs:
            raise ValueError("the run and the baseline have no backend in common")
        return pairs
    new_b = compare_backend or baseline_backend
    base_b = baseline_backend or compare_backend
    assert new_b is not None and base_b is not None
    if new_b not in new_backends:
        raise ValueError(f"backend {new_b!r} is not in the new results ({', '.join(new_backends)})")
    if base_b not in base_backends:
        raise ValueError(f"backend {base_b!r} is not in the baseline ({', '.join(base_backends)})")
    return [(new_b, base_b)]


def env_warnings(new: dict, base: dict) -> list[str]:
    """Differences that make a comparison doubtful (another GPU, another torch)."""
    out = []
    ne, be = new.get("env") or {}, base.get("env") or {}
    for key in ("gpu", "torch", "driver", "nvfuser_direct"):
        if ne.get(key) != be.get(key) and (ne.get(key) or be.get(key)):
            out.append(f"{key} differs: baseline {be.get(key)!r}, new {ne.get(key)!r}")
    return out


def compare(
    new: dict,
    base: dict,
    *,
    threshold: Optional[float] = None,
    pairs: Optional[Sequence[tuple[str, str]]] = None,
    remeasure: Optional[Remeasure] = None,
    repeats: int = 3,
    reduce: str = "min",
    metric: str = METRIC,
    min_delta_us: Optional[float] = None,
) -> Comparison:
    """Compare ``new`` with ``base`` (both result documents); see the module docstring.

    ``threshold`` / ``min_delta_us`` default to the metric's METRIC_DEFAULTS.  ``remeasure``
    returns values in the metric's unit."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
    threshold = METRIC_DEFAULTS[metric][0] if threshold is None else threshold
    min_delta_us = METRIC_DEFAULTS[metric][1] if min_delta_us is None else min_delta_us
    if threshold < 0:
        raise ValueError("threshold must be >= 0")
    reducer = _REDUCERS[reduce]
    if pairs is None:
        pairs = backend_pairs(backends_of(new), backends_of(base))
    rows: list[Row] = []
    for wl, per_backend in new["results"].items():
        base_wl = base["results"].get(wl) or {}
        for new_b, base_b in pairs:
            if new_b not in per_backend:
                continue  # not measured in this run (e.g. --only / --backends)
            rows.append(_compare_one(wl, new_b, base_b, per_backend[new_b], base_wl.get(base_b), threshold, metric,
                                     min_delta_us))
    for row in rows:
        if row.status == REGRESSION and remeasure is not None and metric in REMEASURABLE:
            _recheck(row, remeasure, repeats, reducer, threshold, min_delta_us, metric)
    return Comparison(rows=rows, threshold=threshold, pairs=list(pairs), warnings=env_warnings(new, base),
                      metric=metric, min_delta_us=min_delta_us)


def _worse(new: float, base: float, th: float, metric: str, min_delta: float = DEFAULT_MIN_DELTA_US) -> bool:
    """Kernel counts are exact: one more kernel per call is a regression whatever the threshold.
    Times must grow by the threshold and by at least `min_delta` microseconds."""
    if metric == "kernels":
        return new >= base + 0.5
    return new > base * (1 + th) and (new - base) * US_PER_UNIT.get(metric, 1.0) >= min_delta


def _better(new: float, base: float, th: float, metric: str, min_delta: float = DEFAULT_MIN_DELTA_US) -> bool:
    if metric == "kernels":
        return new <= base - 0.5
    return new < base * (1 - th) and (base - new) * US_PER_UNIT.get(metric, 1.0) >= min_delta


def _compare_one(wl: str, new_b: str, base_b: str, rec: dict, base_rec: Optional[dict], th: float,
                 metric: str = METRIC, min_delta: float = DEFAULT_MIN_DELTA_US) -> Row:
    new_us = rec.get(metric)
    base_us = (base_rec or {}).get(metric)
    row = Row(wl, new_b, base_b, base_us, new_us, OK, final_us=new_us)
    unmeasured = new_us is None and not rec.get("error")  # e.g. host_us of a --no-host run
    if base_rec is None:
        row.status = NO_BASELINE
    elif unmeasured:
        row.status = NOT_MEASURED
    elif new_us is None and base_us is None:
        row.status = BOTH_ERROR
    elif new_us is None:
        row.status = NEW_ERROR
        row.note = str(rec.get("error") or "no GPU time")[:160]
    elif base_us is None:
        row.status = FIXED
    elif _worse(new_us, base_us, th, metric, min_delta):
        row.status = REGRESSION
    elif _better(new_us, base_us, th, metric, min_delta):
        row.status = FASTER
    if (base_rec or {}).get("accuracy") == "pass" and rec.get("accuracy") == "fail":  # the zoo's fp64 check
        row.status = REGRESSION
        row.note = "accuracy check fails (passed in the baseline): " + str(rec.get("acc_detail") or "")[:120]
    return row


def _recheck(row: Row, remeasure: Remeasure, repeats: int, reducer, th: float,
             min_delta: float = DEFAULT_MIN_DELTA_US, metric: str = METRIC) -> None:
    try:
        again = [float(v) for v in remeasure(row.workload, row.backend, repeats) if v is not None]
    except Exception as exc:  # noqa: BLE001  (keep the original verdict)
        again = []
        row.note = f"re-measure failed: {type(exc).__name__}: {exc}"[:160]
    row.remeasured = again
    if not again:
        row.note = row.note or "re-measure gave no number; original verdict kept"
        return
    row.final_us = reducer(again)
    assert row.baseline_us is not None
    if not _worse(row.final_us, row.baseline_us, th, metric, min_delta):
        row.status = NOISE


def render_comparison(cmp: Comparison, only_interesting: bool = False) -> str:
    """Github table of the comparison, warnings and a one-line verdict."""
    unit = cmp.metric.rsplit("_", 1)[-1] if cmp.metric in US_PER_UNIT else ""
    digits = 3 if unit == "ms" else 1
    headers = ["workload", "backend", "baseline backend", f"baseline {unit}".strip(), f"new {unit}".strip(),
               f"re-measured {unit}".strip(), "new/base", "status"]
    body = []
    for r in cmp.rows:
        if only_interesting and r.status in (OK, NO_BASELINE):
            continue
        again = ", ".join(fmt_num(v, digits) for v in r.remeasured) if r.remeasured else "-"
        status = r.status + (f" ({r.note})" if r.note else "")
        body.append(
            [r.workload, r.backend, r.baseline_backend, fmt_num(r.baseline_us, digits), fmt_num(r.new_us, digits), again,
             fmt_ratio(r.ratio), status]
        )
    floor = "" if cmp.metric == "kernels" else f" and +{cmp.min_delta_us:g} us"
    parts = [f"### Baseline comparison ({METRICS[cmp.metric]}, threshold +{cmp.threshold * 100:.0f}%{floor})"]
    parts += [f"warning: {w}" for w in cmp.warnings]
    if body:
        parts.append(tabulate(body, headers=headers, tablefmt=TABLEFMT, disable_numparse=True))
    n = len(cmp.regressions)
    parts.append(f"{n} regression(s) in {len(cmp.rows)} compared pair(s)" if n else f"no regression in {len(cmp.rows)} compared pair(s)")
    return "\n\n".join(parts) + "\n"
