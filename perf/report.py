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
      "workloads": {name: {"kind", "dtype", "tags", "quick", "has_bytes_moved", "description",
                           "timing": "gpu" | "step", "cost"}},
      "results": {name: {backend: record}},   # record: perf.measure.empty_record() keys
      "ratios": {name: {metric: {"nvf_bookend/eager": float|null, ...}}},
      "host_floor": {"start_us", "end_us"},   # perf.measure.host_floor_us at the run's ends
      "acceptance": [...],                # model workloads only (perf.acceptance)
      "comparison": {...}                 # only when a baseline was checked (perf.baseline)
    }

Shards of one run (``--shard i/n``) are separate documents; :func:`join_documents` makes the one
document the tables and the acceptance ratios are computed from.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from tabulate import tabulate

from .acceptance import evaluate, render_acceptance
from .backends import RATIO_PAIRS
from .env import format_env
from .figures import (SAME_RUN_ENV, TABLEFMT, backends_of, fmt_num, fmt_ratio, geomean,  # noqa: F401
                      missing_pairs, ratio, timing_of)

SCHEMA = "dynamo_nvf.perf/1"


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
    timing: Optional[str] = None  # only workloads of this timing ("gpu", "step"); None: all
    spread_key: Optional[str] = None  # a median to show next to the best value, as +N%


FAMILIES: tuple[Family, ...] = (
    Family("step_ms", "Step time as a user sees it (ms per step, wall clock with host, best batch; +N%: median batch)",
           3, True, timing="step", spread_key="step_ms_median"),
    Family("enqueue_ms", "Host enqueue per step (ms, until the step call returns, best batch; +N%: median batch)",
           3, True, timing="step", spread_key="enqueue_ms_median"),
    Family("kernel_ms", "GPU kernel time per step (ms, kernels + memcpy/memset, torch.profiler)", 3, True, timing="step"),
    Family("nvfuser_calls", "nvFuser calls per step (dynamo_nvf.STATS)", 1, False, timing="step", count=True),
    Family("gpu_us", "GPU time per call (us, CUDA events, median)", 1, True, timing="gpu"),
    Family("kernels", "Kernels per call (torch.profiler)", 1, True, count=True),
    Family("kernel_us", "Summed kernel time per call (us, torch.profiler)", 1, True, timing="gpu"),
    Family("host_us", "Host time per call on tiny inputs (us, best batch; +N%: median batch)", 1, True,
           timing="gpu", spread_key="host_us_median"),
    Family("compile_s", "First call incl. compile (s)", 2, False),
    Family("peak_mem_mb", "Peak memory over one call (MiB, inputs and parameters included)", 1, False),
    Family("roofline_frac", "Bandwidth (% of device copy roofline)", 1, False, 100.0, "has_bytes_moved", timing="gpu"),
)

RATIO_METRICS = tuple(f.key for f in FAMILIES if f.ratios)


def ratio_name(ref: str, subject: str = "nvf_bookend") -> str:
    return f"{subject}/{ref}"


def ratio_pairs(backends: Sequence[str]) -> list[tuple[str, str]]:
    """The (subject, reference) ratio columns of a run: those of RATIO_PAIRS with both sides in it."""
    return [(s, r) for s, r in RATIO_PAIRS if s in backends and r in backends]


def compute_ratios(results: dict, backends: Sequence[str]) -> dict:
    """ratios[workload][metric]['<subject>/<ref>'] for each ratio pair present in the run."""
    pairs = ratio_pairs(backends)
    if not pairs:
        return {}
    out: dict = {}
    for wl, per_backend in results.items():
        out[wl] = {
            m: {
                ratio_name(r, s): ratio((per_backend.get(s) or {}).get(m), (per_backend.get(r) or {}).get(m))
                for s, r in pairs
            }
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
    host_floor: Optional[dict] = None,
) -> dict:
    """Assemble the JSON document (see module docstring)."""
    doc = {
        "schema": SCHEMA,
        "env": env,
        "config": config,
        "backends": list(backends),
        "roofline": roofline,
        "host_floor": host_floor or {},
        "workloads": workloads,
        "results": results,
        "ratios": compute_ratios(results, backends),
    }
    return with_acceptance(doc)


def with_acceptance(doc: dict) -> dict:
    """Stores the acceptance verdicts of a document with model workloads (none otherwise)."""
    verdicts = evaluate(doc)
    doc["acceptance"] = [v.to_json() for v in verdicts]
    return doc


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


# ------------------------------------------------------------------------- formatting


def _cell(rec: Optional[dict], fam: Family) -> str:
    if rec is None:
        return "-"
    val = rec.get(fam.key)
    if val is None:
        return "ERR" if rec.get("error") or rec.get("errors") else "-"
    text = fmt_num(val * fam.scale, fam.digits, fam.count)
    median = rec.get(fam.spread_key) if fam.spread_key else None
    if median is not None and val > 0:
        text += f" +{(median / val - 1) * 100:.0f}%"
    return text


def table_rows(doc: dict, fam: Family) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of one family: a row per workload, backend values then ratios."""
    backends = backends_of(doc)
    pairs = ratio_pairs(backends) if fam.ratios else []
    headers = ["workload"] + backends + [ratio_name(r, s) for s, r in pairs]
    rows = []
    metas = doc.get("workloads") or {}
    for wl, per_backend in doc["results"].items():
        if fam.needs and not (metas.get(wl) or {}).get(fam.needs):
            continue
        if fam.timing and timing_of(doc, wl) != fam.timing:
            continue
        row = [wl] + [_cell(per_backend.get(b), fam) for b in backends]
        row += [
            fmt_ratio(ratio((per_backend.get(s) or {}).get(fam.key), (per_backend.get(r) or {}).get(fam.key)))
            for s, r in pairs
        ]
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


#: The host floor may grow this much over a run before the report warns (fraction, and us).
HOST_FLOOR_DRIFT = (0.25, 1.0)


def _host_floor_line(floor: dict, label: str) -> str:
    start, end = floor.get("start_us"), floor.get("end_us")
    if start is None or end is None:
        return ""
    line = f"host floor{label} (one tiny eager op): {start:.2f} us at the start, {end:.2f} us at the end"
    frac, abs_us = HOST_FLOOR_DRIFT
    if end > start * (1 + frac) and end - start > abs_us:
        line += (" -- WARNING: host time grew over the run; host numbers measured late are inflated "
                 "(is TEARDOWN_CUPTI=0 set? see perf/README.md, 'Host time')")
    return line


def render_host_floor(doc: dict) -> str:
    """The host floor at the start and the end of the run (of each joined file: each process has
    its own), with a warning on drift."""
    joined = (doc.get("config") or {}).get("joined") or []
    if joined:
        lines = [_host_floor_line(j.get("host_floor") or {}, f" of {j.get('file')}") for j in joined]
        return "\n".join(line for line in lines if line)
    return _host_floor_line(doc.get("host_floor") or {}, "")


def render_report(doc: dict, families: Iterable[Family] = FAMILIES, with_env: bool = True) -> str:
    """Environment header, then one github table per metric family, the acceptance tables of a
    model run, then errors."""
    parts = []
    if with_env and doc.get("env"):
        parts.append(format_env(doc["env"]))
    for line in (render_shards(doc), render_roofline(doc), render_host_floor(doc)):
        if line:
            parts.append(line)
    for fam in families:
        table = render_table(doc, fam)
        if table:
            parts.append(table)
    acceptance = render_acceptance(doc)
    if acceptance:
        parts.append(acceptance)
    from .zoo_report import render_zoo

    zoo = render_zoo(doc)
    if zoo:
        parts.append(zoo)
    errs = error_lines(doc)
    if errs:
        parts.append("### Errors\n\n" + "\n".join(errs))
    return "\n\n".join(parts) + "\n"


# ------------------------------------------------------------------------- shards


def render_shards(doc: dict) -> str:
    """Which shards a document holds, and what of its run is missing."""
    cfg = doc.get("config") or {}
    lines = []
    joined = cfg.get("joined") or []
    if joined:
        parts = [f"{j.get('shard') and '/'.join(map(str, j['shard'])) or '-'} ({j.get('file')}, {j.get('hostname')})"
                 for j in joined]
        lines.append(f"joined from {len(joined)} file(s): " + "; ".join(parts))
    elif cfg.get("shard"):
        i, n = cfg["shard"]
        lines.append(f"shard {i}/{n} of a run: these tables cover this shard only; join the shards' files with "
                     "--report A.json B.json [--json joined.json]")
    if doc.get("partial"):
        lines.append("PARTIAL: a checkpoint of a run that did not finish")
    workers = (cfg.get("gpus") or 1) * (cfg.get("per_gpu") or 1)
    if workers > 1:
        lines.append(f"CONCURRENT: {workers} workload processes at once ({cfg.get('per_gpu') or 1} per GPU); timed "
                     "steps take turns on their GPU but share the CPUs with the others' compiles, so host-bound "
                     "step times and first calls read slow (GPU kernel time, peak memory and accuracy do not)")
    missing = missing_pairs(doc)
    if missing and not cfg.get("shard"):
        lines.append(f"INCOMPLETE: {len(missing)} pair(s) of the run have no record")
    return "\n".join(lines)


def join_documents(docs: Sequence[dict], names: Sequence[str]) -> dict:
    """One document from the shards of one run (``--shard i/n`` files, or a run and a re-run of
    what it missed).  ValueError when they cannot be one run: another GPU, torch, nvFuser or
    commit, other backends or measurement settings, or a workload measured twice."""
    if len(docs) == 1:
        return docs[0]
    first = docs[0]
    problems = []
    for doc, name in zip(docs[1:], names[1:]):
        for key in SAME_RUN_ENV:
            a, b = (first.get("env") or {}).get(key), (doc.get("env") or {}).get(key)
            if a != b:
                problems.append(f"{name}: {key} {b!r} differs from {names[0]}'s {a!r}")
        if backends_of(doc) != backends_of(first):
            problems.append(f"{name}: backends {backends_of(doc)} differ from {backends_of(first)}")
        ma, mb = (first.get("config") or {}).get("measure"), (doc.get("config") or {}).get("measure")
        if ma != mb:
            problems.append(f"{name}: measurement settings differ")
    seen: dict[str, str] = {}
    for doc, name in zip(docs, names):
        for wl in doc["results"]:
            if wl in seen:
                problems.append(f"{wl} is in both {seen[wl]} and {name}")
            seen[wl] = name
    shards = [tuple((d.get("config") or {}).get("shard") or ()) for d in docs]
    if all(shards) and len({s for s in shards}) != len(shards):
        problems.append(f"the same shard twice: {shards}")
    if problems:
        raise ValueError("these files are not shards of one run: " + "; ".join(problems))

    declared: list[str] = []
    for doc in docs:
        declared += [w for w in ((doc.get("config") or {}).get("run_workloads") or doc["results"]) if w not in declared]
    results, workloads = {}, {}
    for doc in docs:
        workloads.update(doc.get("workloads") or {})
    for wl in declared + [w for d in docs for w in d["results"] if w not in declared]:
        for doc in docs:
            if wl in doc["results"]:
                results[wl] = doc["results"][wl]
    config = dict(first.get("config") or {})
    config.update(
        shard=None,
        run_workloads=declared,
        joined=[
            {"file": str(name), "shard": (d.get("config") or {}).get("shard"), "hostname": (d.get("env") or {}).get("hostname"),
             "date": (d.get("env") or {}).get("date"), "host_floor": d.get("host_floor")}
            for d, name in zip(docs, names)
        ],
    )
    env = dict(first.get("env") or {})
    env["hostname"] = ", ".join(dict.fromkeys(str((d.get("env") or {}).get("hostname")) for d in docs))
    joined = make_document(
        env=env,
        config=config,
        backends=backends_of(first),
        workloads=workloads,
        results=results,
        roofline=next((d.get("roofline") for d in docs if d.get("roofline")), None),
        host_floor={},  # one per process: in config["joined"]
    )
    if any(d.get("partial") for d in docs):
        joined["partial"] = True
    return joined
