"""The acceptance of issue #10 ("real models must not be host-bound"), read from one result document.

All from ONE run (a joined document where the run was sharded), over every model workload
(``timing == "step"``) in it:

* with CUDA graphs: every workload's step time at most 1.0x inductor reduce-overhead's, and the
  geomean at most 0.9x (training included);
* without graphs: every workload's step time at most 1.0x eager's; the geomean at most 1.0x
  inductor default's; host enqueue per step at most inductor's on the geomean.

``python -m perf.interleave ... --acceptance`` builds the same document from interleaved rounds
(every backend of a workload compiled at once and timed in rotated rounds); its ratios are then the
medians of per-round ratios, the form to gate on where the host drifts between pairs (the same
vit_fwd_bf16_small/nvf_bookend step read 0.53 and 1.17 ms in two processes minutes apart, H100,
2026-11-23).

A criterion whose ratios are not all there (a backend missing from the run, a pair that errored,
a workload of the run not measured) is INCOMPLETE, which fails like FAIL: an acceptance never
passes on part of the evidence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

from tabulate import tabulate

from .figures import TABLEFMT, backends_of, fmt_ratio, geomean, missing_pairs, ratio, timing_of

PASS, FAIL, INCOMPLETE = "PASS", "FAIL", "INCOMPLETE"


@dataclass(frozen=True)
class Criterion:
    """``aggregate`` of metric(subject)/metric(reference) over the model workloads <= ``limit``."""

    text: str
    metric: str
    subject: str
    reference: str
    aggregate: str  # "max": every workload; "geomean"
    limit: float

    @property
    def column(self) -> str:
        return f"{self.metric} {self.subject}/{self.reference}"


CRITERIA: tuple[Criterion, ...] = (
    Criterion("CUDA graphs: every workload's step time <= inductor reduce-overhead", "step_ms",
              "nvf_cudagraphs", "inductor_ro", "max", 1.0),
    Criterion("CUDA graphs: geomean step time <= 0.9x inductor reduce-overhead", "step_ms",
              "nvf_cudagraphs", "inductor_ro", "geomean", 0.9),
    Criterion("no graphs: every workload's step time <= eager", "step_ms", "nvf_bookend", "eager", "max", 1.0),
    Criterion("no graphs: geomean step time <= inductor default", "step_ms", "nvf_bookend", "inductor", "geomean", 1.0),
    Criterion("no graphs: geomean host enqueue per step <= inductor default", "enqueue_ms",
              "nvf_bookend", "inductor", "geomean", 1.0),
)

#: The ratio columns of the per-workload table, in order (one per distinct criterion ratio).
COLUMNS: tuple[tuple[str, str, str], ...] = tuple(
    dict.fromkeys((c.metric, c.subject, c.reference) for c in CRITERIA)
)


@dataclass
class Verdict:
    criterion: Criterion
    value: Optional[float]
    measured: int  # workloads with the ratio
    expected: int  # model workloads of the run
    worst: str  # workload with the largest ratio
    status: str

    def to_json(self) -> dict:
        return dict(asdict(self), criterion=asdict(self.criterion))


def model_workloads(doc: dict) -> list[str]:
    """Model workloads of the run: measured ones, then any the run declared but did not measure."""
    metas = doc.get("workloads") or {}

    def tier(wl: str) -> bool:  # the zoo has its own criteria (perf/zoo_report.py)
        return "zoo" not in ((metas.get(wl) or {}).get("tags") or ())

    names = [wl for wl in doc["results"] if timing_of(doc, wl) == "step" and tier(wl)]
    declared = (doc.get("config") or {}).get("run_workloads") or []
    names += [wl for wl in declared if wl not in names and (metas.get(wl) or {}).get("timing") == "step" and tier(wl)]
    return names


def workload_ratio(doc: dict, workload: str, metric: str, subject: str, reference: str) -> Optional[float]:
    """metric(subject)/metric(reference); a document from perf.interleave gives the median of the
    per-round ratios instead (``round_ratios``), which no drift between pairs can bias."""
    interleaved = ((doc.get("round_ratios") or {}).get(workload) or {}).get(metric) or {}
    if f"{subject}/{reference}" in interleaved:
        return interleaved[f"{subject}/{reference}"]
    per_backend = doc["results"].get(workload) or {}
    return ratio((per_backend.get(subject) or {}).get(metric), (per_backend.get(reference) or {}).get(metric))


def evaluate(doc: dict) -> list[Verdict]:
    """One verdict per criterion; empty when the document has no model workload."""
    names = model_workloads(doc)
    if not names:
        return []
    backends = backends_of(doc)
    verdicts = []
    for c in CRITERIA:
        ratios = {wl: workload_ratio(doc, wl, c.metric, c.subject, c.reference) for wl in names}
        have = {wl: r for wl, r in ratios.items() if r is not None}
        worst = max(have, key=lambda wl: have[wl]) if have else ""
        value = geomean(have.values()) if c.aggregate == "geomean" else (have[worst] if have else None)
        complete = c.subject in backends and c.reference in backends and len(have) == len(names)
        if not complete or value is None:
            status = INCOMPLETE
        else:
            status = PASS if value <= c.limit else FAIL
        verdicts.append(Verdict(c, value, len(have), len(names), worst, status))
    return verdicts


def passed(doc: dict) -> bool:
    """True when the document has model workloads and every criterion passes."""
    verdicts = evaluate(doc)
    return bool(verdicts) and all(v.status == PASS for v in verdicts)


def ratio_table(doc: dict) -> tuple[list[str], list[list[str]]]:
    """Per model workload, the criteria's ratios; a last row with their geomeans."""
    names = model_workloads(doc)
    headers = ["workload"] + [f"{m} {s}/{r}" for m, s, r in COLUMNS]
    rows = []
    columns: list[list[Optional[float]]] = [[] for _ in COLUMNS]
    for wl in names:
        row = [wl]
        for i, (m, s, r) in enumerate(COLUMNS):
            value = workload_ratio(doc, wl, m, s, r)
            columns[i].append(value)
            row.append(fmt_ratio(value))
        rows.append(row)
    rows.append(["geomean"] + [fmt_ratio(geomean(col)) for col in columns])
    return headers, rows


def render_acceptance(doc: dict) -> str:
    """The two acceptance tables of a model run ('' without model workloads)."""
    verdicts = evaluate(doc)
    if not verdicts:
        return ""
    if (doc.get("config") or {}).get("shard"):
        return "acceptance: not evaluated on one shard; join the shards' files with --report A.json B.json"
    headers, rows = ratio_table(doc)
    parts = [
        "### Acceptance (issue #10): step-time and host-enqueue ratios per model workload",
        tabulate(rows, headers=headers, tablefmt=TABLEFMT, disable_numparse=True),
    ]
    body = []
    for v in verdicts:
        c = v.criterion
        agg = "max" if c.aggregate == "max" else "geomean"
        value = fmt_ratio(v.value) + (f" ({v.worst})" if c.aggregate == "max" and v.worst else "")
        body.append([c.text, f"{agg} {c.column}", value, f"<= {c.limit:.2f}x", f"{v.measured}/{v.expected}", v.status])
    parts.append(tabulate(body, headers=["criterion", "ratio", "value", "limit", "workloads", "status"],
                          tablefmt=TABLEFMT, disable_numparse=True))
    missing = missing_pairs(doc)
    if missing:
        parts.append(f"not measured in this run ({len(missing)} pair(s)): " + ", ".join(missing[:12])
                     + (", ..." if len(missing) > 12 else ""))
    ok = all(v.status == PASS for v in verdicts)
    parts.append("acceptance: PASS" if ok else "acceptance: NOT MET")
    return "\n\n".join(parts)
