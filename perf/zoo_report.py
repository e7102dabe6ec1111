"""The zoo's tables, read from a result document (a run or joined shards): per suite and kind one
row per model, geomeans per suite and overall, the GPU-time gap to inductor by kind of kernel,
the ATen ops left to ATen, the regions that fell back to eager and why, the dynamic-shape run and the
criteria of issue #42.  Only recorded
numbers are used, so ``--report`` prints them anywhere.
"""

from __future__ import annotations

from typing import Optional

from tabulate import tabulate

from .acceptance import FAIL, INCOMPLETE, PASS, Criterion
from .figures import TABLEFMT, fmt_ratio, geomean, ratio

SUBJECT, GRAPHS, REF, REF_GRAPHS = "nvf_bookend", "nvf_cudagraphs", "inductor", "inductor_ro"
SUITES = ("timm", "hf")
KINDS = ("fwd", "train")


def zoo_workloads(doc: dict, suite: Optional[str] = None, kind: Optional[str] = None) -> list[str]:
    """Zoo workloads of the document (measured or declared), optionally of one suite and kind."""
    metas = doc.get("workloads") or {}
    declared = list(doc.get("results") or {}) + list((doc.get("config") or {}).get("run_workloads") or [])
    out = []
    for wl in dict.fromkeys(declared):
        tags = set((metas.get(wl) or {}).get("tags") or ())
        if "zoo" in tags and (suite is None or suite in tags) and (kind is None or kind in tags):
            out.append(wl)
    return out


def _rec(doc: dict, wl: str, backend: str) -> dict:
    return ((doc.get("results") or {}).get(wl) or {}).get(backend) or {}


def _ratio(doc: dict, wl: str, metric: str, subject: str, reference: str) -> Optional[float]:
    return ratio(_rec(doc, wl, subject).get(metric), _rec(doc, wl, reference).get(metric))


def status(doc: dict, wl: str, backend: str = SUBJECT) -> str:
    """"pass" (with the regions that fell back to eager, if any), or why not: the error, a failed
    accuracy check, or "not run"."""
    rec = _rec(doc, wl, backend)
    if not rec:
        return "not run"
    if rec.get("error"):
        return "error " + str(rec["error"])[:90]
    if rec.get("accuracy") == "fail":
        return f"accuracy (rmse {rec.get('acc_rmse_ratio', 0):.2f}x eager's)"
    if rec.get("accuracy") == "no reference":
        return "unchecked (no fp64 reference)"
    if rec.get("fallbacks"):
        return f"pass, {rec['fallbacks']} region(s) fell back to eager"
    return "pass"


def _num(value: Optional[float], digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _top_other(rec: dict, n: int = 3) -> str:
    rows = [r for r in rec.get("aten_ops") or () if r[1] == "other"][:n]
    return ", ".join(f"{r[0].removeprefix('aten::')} {r[2]:.0f}us" for r in rows) or "-"


#: (column, metric, subject, reference) of the ratio columns; geomeans are taken over these.
RATIO_COLUMNS: tuple[tuple[str, str, str, str], ...] = (
    ("step nvf/ind", "step_ms", SUBJECT, REF),
    ("step nvf_cg/ind_ro", "step_ms", GRAPHS, REF_GRAPHS),
    ("kernel nvf/ind", "kernel_ms", SUBJECT, REF),
    ("first call nvf/ind", "compile_s", SUBJECT, REF),
    ("peak mem nvf/ind", "peak_mem_mb", SUBJECT, REF),
)


def suite_table(doc: dict, suite: str, kind: str) -> str:
    names = zoo_workloads(doc, suite, kind)
    if not names:
        return ""
    headers = ["model", "nvf_bookend", "nvf_cudagraphs", "acc rmse/eager", "step ms ind", "step ms nvf",
               *[c[0] for c in RATIO_COLUMNS], "kernels ind", "kernels nvf", "regions/step", "ATen ms (mm/conv/sdpa/other)",
               "top other ATen ops (nvf)"]
    rows = []
    for wl in names:
        nvf, ind = _rec(doc, wl, SUBJECT), _rec(doc, wl, REF)
        ms = nvf.get("aten_ms") or {}
        rows.append([
            wl.removeprefix(f"zoo_{suite}_").removesuffix(f"_{kind}_bf16"), status(doc, wl), status(doc, wl, GRAPHS),
            _num(nvf.get("acc_rmse_ratio")), _num(ind.get("step_ms"), 3), _num(nvf.get("step_ms"), 3),
            *[fmt_ratio(_ratio(doc, wl, m, s, r)) for _, m, s, r in RATIO_COLUMNS],
            _num(ind.get("kernels"), 0), _num(nvf.get("kernels"), 0), _num(nvf.get("nvfuser_calls"), 0),
            "/".join(_num(ms.get(c), 2) for c in ("matmul", "conv", "sdpa", "other")) if ms else "-",
            _top_other(nvf),
        ])
    rows.append(["geomean", "", "", "", "", "",
                 *[fmt_ratio(geomean(_ratio(doc, wl, m, s, r) for wl in names)) for _, m, s, r in RATIO_COLUMNS],
                 "", "", "", "", ""])
    title = f"### Zoo: {suite} {'inference' if kind == 'fwd' else 'training step'} (bf16)"
    return title + "\n\n" + tabulate(rows, headers=headers, tablefmt=TABLEFMT, disable_numparse=True)


def geomean_table(doc: dict) -> str:
    rows = []
    for suite in SUITES + ("all",):
        for kind in KINDS:
            names = zoo_workloads(doc, None if suite == "all" else suite, kind)
            if not names:
                continue
            passed = sum(status(doc, wl) == "pass" for wl in names)
            rows.append([suite, kind, f"{passed}/{len(names)}",
                         *[fmt_ratio(geomean(_ratio(doc, wl, m, s, r) for wl in names)) for _, m, s, r in RATIO_COLUMNS],
                         fmt_ratio(max((x for x in (_ratio(doc, wl, "step_ms", SUBJECT, REF) for wl in names)
                                        if x is not None), default=None))])
    if not rows:
        return ""
    headers = ["suite", "kind", "nvf passed", *[c[0] for c in RATIO_COLUMNS], "worst step nvf/ind"]
    return "### Zoo geomeans\n\n" + tabulate(rows, headers=headers, tablefmt=TABLEFMT, disable_numparse=True)


def aten_table(doc: dict, backend: str = SUBJECT, top: int = 25) -> str:
    """The ATen ops left to ATen under ``backend`` over the whole zoo, ranked by GPU time summed
    over the workloads (ms per step), with the workloads they appear in."""
    total: dict[str, list] = {}
    for wl in zoo_workloads(doc):
        for name, cat, us, calls in _rec(doc, wl, backend).get("aten_ops") or ():
            row = total.setdefault(name, [name, cat, 0.0, 0.0, 0])
            row[2] += us / 1e3
            row[3] += calls
            row[4] += 1
    if not total:
        return ""
    rows = sorted(total.values(), key=lambda r: -r[2])[:top]
    rows = [[r[0], r[1], f"{r[2]:.3f}", f"{r[3]:g}", r[4]] for r in rows]
    return (f"### Zoo: ATen ops under {backend}, ranked by GPU time (ms per step summed over workloads)\n\n"
            + tabulate(rows, headers=["op", "category", "ms", "calls", "workloads"], tablefmt=TABLEFMT,
                       disable_numparse=True))


#: The kinds of GPU time in a profiled step (perf.measure.profile_ops' ``aten_ms``): ATen's matmuls,
#: convolutions, attention and other ops, and ``fused``, the kernels launched outside any ATen op
#: (nvFuser's regions, inductor's Triton kernels).
GPU_TIME_KINDS: tuple[tuple[str, str], ...] = (
    ("matmul", "matmul"), ("conv", "conv"), ("sdpa", "sdpa"), ("other", "other ATen"), ("fused", "fused"))


def _signed(ms: float) -> str:
    return f"{round(ms, 3) + 0.0:+.3f}"  # + 0.0: no "-0.000"


def gap_table(doc: dict) -> str:
    """Where nvf_bookend's GPU time per step differs from inductor's, by kind of kernel (ms, nvf minus
    inductor; positive: nvf spends more), per zoo workload profiled under both and summed over those:
    whether the two backends' fusions, the ops left to ATen or the library calls carry a kernel-time gap."""
    kinds = [key for key, _ in GPU_TIME_KINDS]
    rows, total, kernel = [], dict.fromkeys(kinds, 0.0), [0.0, 0.0]
    for wl in zoo_workloads(doc):
        nvf, ind = _rec(doc, wl, SUBJECT), _rec(doc, wl, REF)
        split = nvf.get("aten_ms") or {}, ind.get("aten_ms") or {}
        if any(side.get(key) is None for side in split for key in kinds) or None in (nvf.get("kernel_ms"),
                                                                                      ind.get("kernel_ms")):
            continue  # not profiled by kind under both (an error, or a record without every kind)
        deltas = {key: split[0][key] - split[1][key] for key in kinds}
        for key, value in deltas.items():
            total[key] += value
        kernel[0] += ind["kernel_ms"]
        kernel[1] += nvf["kernel_ms"]
        rows.append([wl.removeprefix("zoo_"), f"{ind['kernel_ms']:.3f} / {nvf['kernel_ms']:.3f}",
                     *[_signed(deltas[key]) for key in kinds]])
    if not rows:
        return ""
    rows.append([f"all ({len(rows)})", f"{kernel[0]:.3f} / {kernel[1]:.3f}", *[_signed(total[key]) for key in kinds]])
    return ("### Zoo: GPU time per step by kind, nvf_bookend minus inductor (ms)\n\n"
            + tabulate(rows, headers=["workload", "kernel ms ind / nvf", *[label for _, label in GPU_TIME_KINDS]],
                       tablefmt=TABLEFMT, disable_numparse=True))


def fallback_table(doc: dict, width: int = 220) -> str:
    """Each region that went to eager for good in a zoo pair (an nvFuser error), with its reason: the
    status column counts them, this names them."""
    rows = []
    for wl in zoo_workloads(doc):
        for backend in (SUBJECT, GRAPHS):
            for reason in _rec(doc, wl, backend).get("fallback_reasons") or ():
                text = " ".join(str(reason).split())
                rows.append([wl.removeprefix("zoo_"), backend, text if len(text) <= width else text[:width - 3] + "..."])
    if not rows:
        return ""
    return ("### Zoo: regions that fell back to eager (nvFuser errors)\n\n"
            + tabulate(rows, headers=["workload", "backend", "region (ops): error"], tablefmt=TABLEFMT,
                       disable_numparse=True))


def dynamic_table(doc: dict) -> str:
    names = [wl for wl in zoo_workloads(doc) if "dyn" in ((doc.get("workloads") or {}).get(wl) or {}).get("tags", ())]
    if not names:
        return ""
    rows = []
    for wl in names:
        nvf, ind = _rec(doc, wl, SUBJECT), _rec(doc, wl, REF)
        lengths = nvf.get("dyn_lengths") or ind.get("dyn_lengths") or []
        ratios = [ratio(a, b) for a, b in zip(nvf.get("dyn_step_ms") or (), ind.get("dyn_step_ms") or ())]
        rows.append([wl.removeprefix("zoo_hf_").removesuffix("_dyn_bf16"), status(doc, wl),
                     "/".join(map(str, lengths)) or "-",
                     "/".join(map(str, ind.get("dyn_graphs") or ())) or "-",
                     "/".join(map(str, nvf.get("dyn_graphs") or ())) or "-",
                     " ".join(fmt_ratio(r) for r in ratios) or "-"])
    return ("### Zoo: dynamic shapes (inference at three sequence lengths, one process; graphs compiled at each "
            "length: 0 = no recompile)\n\n"
            + tabulate(rows, headers=["model", "nvf_bookend", "lengths", "graphs ind", "graphs nvf",
                                      "step nvf/ind per length"], tablefmt=TABLEFMT, disable_numparse=True))


#: Issue #42's acceptance, over the zoo's fwd and train workloads of one run.
CRITERIA: tuple[Criterion, ...] = (
    Criterion("step time geomean <= inductor (no graphs)", "step_ms", SUBJECT, REF, "geomean", 1.0),
    Criterion("step time geomean <= inductor reduce-overhead (CUDA graphs)", "step_ms", GRAPHS, REF_GRAPHS, "geomean", 1.0),
    Criterion("no model's step time above 1.25x inductor", "step_ms", SUBJECT, REF, "max", 1.25),
    Criterion("no model's CUDA-graph step time above 1.25x inductor_ro", "step_ms", GRAPHS, REF_GRAPHS, "max", 1.25),
    Criterion("GPU kernel time geomean <= inductor", "kernel_ms", SUBJECT, REF, "geomean", 1.0),
    Criterion("first call geomean <= 1.5x inductor's", "compile_s", SUBJECT, REF, "geomean", 1.5),
    Criterion("peak memory geomean <= 1.1x inductor's", "peak_mem_mb", SUBJECT, REF, "geomean", 1.1),
)


def evaluate(doc: dict) -> list[list[str]]:
    """[criterion, value, measured/expected, PASS|FAIL|INCOMPLETE] rows; every model passing its
    accuracy check and the dynamic run's recompiles are rows too."""
    names = [wl for kind in KINDS for wl in zoo_workloads(doc, kind=kind)]
    if not names:
        return []
    rows = []
    for c in CRITERIA:
        have = {wl: r for wl in names if (r := _ratio(doc, wl, c.metric, c.subject, c.reference)) is not None}
        value = geomean(have.values()) if c.aggregate == "geomean" else max(have.values(), default=None)
        verdict = INCOMPLETE if value is None or len(have) < len(names) else (PASS if value <= c.limit else FAIL)
        rows.append([c.text, fmt_ratio(value), f"{len(have)}/{len(names)}", verdict])
    for backend in (SUBJECT, GRAPHS):
        passed = sum(status(doc, wl, backend) == "pass" for wl in names)
        rows.append([f"every model runs and matches fp64 within inductor's tolerance ({backend})", "-",
                     f"{passed}/{len(names)}", PASS if passed == len(names) else FAIL])
    dyn = [wl for wl in zoo_workloads(doc, kind="dyn")]
    if dyn:
        worse = [wl for wl in dyn if (_rec(doc, wl, SUBJECT).get("recompiles") is None
                                      or _rec(doc, wl, REF).get("recompiles") is None
                                      or _rec(doc, wl, SUBJECT)["recompiles"] > _rec(doc, wl, REF)["recompiles"])]
        rows.append(["dynamic shapes: no more recompiles than inductor", "-", f"{len(dyn) - len(worse)}/{len(dyn)}",
                     PASS if not worse else FAIL])
    return rows


def render_zoo(doc: dict) -> str:
    """Every zoo table of the document; empty when it has no zoo workload."""
    if not zoo_workloads(doc):
        return ""
    parts = [suite_table(doc, s, k) for s in SUITES for k in KINDS]
    parts += [geomean_table(doc), gap_table(doc), aten_table(doc), fallback_table(doc), dynamic_table(doc)]
    verdicts = evaluate(doc)
    if verdicts:
        parts.append("### Zoo acceptance (issue #42)\n\n"
                     + tabulate(verdicts, headers=["criterion", "value", "measured", "verdict"], tablefmt=TABLEFMT,
                                disable_numparse=True))
    return "\n\n".join(p for p in parts if p)


def zoo_passed(doc: dict) -> bool:
    rows = evaluate(doc)
    return bool(rows) and all(r[-1] == PASS for r in rows)
