"""Result documents (JSON) and tables, built only from recorded numbers.

Everything here works on the plain-dict document, so tables and comparisons can be
regenerated from a stored file on a machine without a GPU.

Document schema (``SCHEMA``)::

    {
      "schema": "dynamo_nvf.perf/1",
      "env": {...},                       # perf.env.collect_env()
      "config": {...},                    # MeasureConfig + selection (quick, backends, ...)
      "backends": ["eager", ...],         # column order
      "roofline": {"copy_bytes", "copy_us", "bytes_per_s"} | {"error"} | null,
      "workloads": {name: {"kind", "dtype", "tags", "quick", "has_bytes_moved", "description"}},
      "results": {name: {backend: record}},   # record: perf.measure.empty_record() keys
      "ratios": {name: {metric: {"nvf_bookend/eager": float|null, ...}}},
      "comparison": {...}                 # only when a baseline was checked (perf.baseline)
    }
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from tabulate import tabulate

from .backends import REFERENCES, SUBJECT
from .env import format_env

SCHEMA = "dynamo_nvf.perf/1"
TABLEFMT = "github"


@dataclass(frozen=True)
class Family:
    """One printed table: a record key, its unit, and whether ratio columns make sense."""

    key: str
    title: str
    digits: int
    ratios: bool
    scale: float = 1.0  # shown value = record value * scale
    needs: Optional[str] = None  # only workloads whose meta has this truthy key
    count: bool = False  # whole numbers print without decimals (kernel counts)


FAMILIES: tuple[Family, ...] = (
    Family("gpu_us", "GPU time per call (us, CUDA events, median)", 1, True),
    Family("kernels", "Kernels per call (torch.profiler)", 1, True, count=True),
    Family("kernel_us", "Summed kernel time per call (us, torch.profiler)", 1, True),
    Family("host_us", "Host time per call on tiny inputs (us)", 1, True),
    Family("compile_s", "First call incl. compile (s)", 2, False),
    Family("peak_mem_mb", "Peak memory over one call (MiB, inputs and parameters included)", 1, False),
    Family("roofline_frac", "Bandwidth (% of device copy roofline)", 1, False, 100.0, "has_bytes_moved"),
)

RATIO_METRICS = tuple(f.key for f in FAMILIES if f.ratios)


def ratio_name(ref: str) -> str:
    return f"{SUBJECT}/{ref}"


def ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    """num/den; None when either is missing; 0/0 is 1.0 (equal), x/0 is inf."""
    if num is None or den is None:
        return None
    if den == 0:
        return 1.0 if num == 0 else math.inf
    return num / den


def compute_ratios(results: dict, backends: Sequence[str]) -> dict:
    """ratios[workload][metric]['nvf_bookend/<ref>'] for each reference present in the run."""
    if SUBJECT not in backends:
        return {}
    refs = [r for r in REFERENCES if r in backends]
    out: dict = {}
    for wl, per_backend in results.items():
        subj = per_backend.get(SUBJECT) or {}
        out[wl] = {
            m: {ratio_name(r): ratio(subj.get(m), (per_backend.get(r) or {}).get(m)) for r in refs}
            for m in RATIO_METRICS
        }
    return out


def make_document(
    *,
    env: dict,
    config: dict,
    backends: Sequence[str],
    workloads: dict,
    results: dict,
    roofline: Optional[dict],
) -> dict:
    """Assemble the JSON document (see module docstring)."""
    return {
        "schema": SCHEMA,
        "env": env,
        "config": config,
        "backends": list(backends),
        "roofline": roofline,
        "workloads": workloads,
        "results": results,
        "ratios": compute_ratios(results, backends),
    }


def _json_safe(obj: Any) -> Any:
    """Strict JSON: non-finite floats become null (json.dumps would write Infinity/NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def to_json(doc: dict) -> str:
    return json.dumps(_json_safe(doc), indent=2, allow_nan=False)


def write_document(doc: dict, path: "str | Path") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_json(doc) + "\n")
    return path


def load_document(path: "str | Path") -> dict:
    """Read a result file; ValueError when it is not one of ours."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read result file {path}: {exc}") from exc
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("dynamo_nvf.perf/"):
        raise ValueError(f"{path}: not a perf result file (missing schema {SCHEMA!r})")
    if not isinstance(doc.get("results"), dict):
        raise ValueError(f"{path}: no 'results' mapping")
    doc["backends"] = backends_of(doc)
    return doc


def backends_of(doc: dict) -> list[str]:
    """Column order: the document's "backends", else first appearance in its results."""
    if doc.get("backends"):
        return list(doc["backends"])
    seen: list[str] = []
    for per_backend in doc["results"].values():
        seen += [b for b in per_backend if b not in seen]
    return seen


# ------------------------------------------------------------------------- formatting


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


def _cell(rec: Optional[dict], fam: Family) -> str:
    if rec is None:
        return "-"
    val = rec.get(fam.key)
    if val is None:
        return "ERR" if rec.get("error") or rec.get("errors") else "-"
    return fmt_num(val * fam.scale, fam.digits, fam.count)


def table_rows(doc: dict, fam: Family) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of one family: a row per workload, backend values then ratios."""
    backends = backends_of(doc)
    refs = [r for r in REFERENCES if r in backends] if fam.ratios and SUBJECT in backends else []
    headers = ["workload"] + backends + [ratio_name(r) for r in refs]
    rows = []
    metas = doc.get("workloads") or {}
    for wl, per_backend in doc["results"].items():
        if fam.needs and not (metas.get(wl) or {}).get(fam.needs):
            continue
        row = [wl] + [_cell(per_backend.get(b), fam) for b in backends]
        subj = (per_backend.get(SUBJECT) or {}).get(fam.key)
        row += [fmt_ratio(ratio(subj, (per_backend.get(r) or {}).get(fam.key))) for r in refs]
        rows.append(row)
    return headers, rows


def render_table(doc: dict, fam: Family) -> str:
    headers, rows = table_rows(doc, fam)
    if not rows:
        return ""
    return f"### {fam.title}\n\n" + tabulate(rows, headers=headers, tablefmt=TABLEFMT, disable_numparse=True)


def error_lines(doc: dict) -> list[str]:
    lines = []
    for wl, per_backend in doc["results"].items():
        for b, rec in per_backend.items():
            for phase, msg in (rec.get("errors") or {}).items():
                lines.append(f"- {wl} / {b} [{phase}]: {msg}")
    return lines


def render_roofline(doc: dict) -> str:
    roof = doc.get("roofline")
    if not roof:
        return ""
    if roof.get("error"):
        return f"copy roofline: ERROR {roof['error']}"
    return (
        f"copy roofline: {roof['bytes_per_s'] / 1e9:.0f} GB/s "
        f"({roof['copy_bytes'] / 2**20:.0f} MiB read+written in {roof['copy_us']:.1f} us)"
    )


def render_report(doc: dict, families: Iterable[Family] = FAMILIES, with_env: bool = True) -> str:
    """Environment header, then one github table per metric family, then errors."""
    parts = []
    if with_env and doc.get("env"):
        parts.append(format_env(doc["env"]))
    roof = render_roofline(doc)
    if roof:
        parts.append(roof)
    for fam in families:
        table = render_table(doc, fam)
        if table:
            parts.append(table)
    errs = error_lines(doc)
    if errs:
        parts.append("### Errors\n\n" + "\n".join(errs))
    return "\n\n".join(parts) + "\n"
