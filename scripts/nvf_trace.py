"""Where nvFuser's own host time goes inside `fec.execute`, from nvFuser's Chrome trace
(NVFUSER_TRACE): per scope name, for the calls that compile (issue #12, ~1-1.8 s per fusion) and for
the steady calls (issue #10, 40-170 us per region).

    python scripts/nvf_trace.py layernorm_train_f32                       # nvf_bookend, 50 steady steps
    python scripts/nvf_trace.py llama_fwd_bf16_small --backend nvf_bookend --steady 200 --top 40
    python scripts/nvf_trace.py llama_fwd_bf16_small --trace /tmp/llama.json --json /tmp/llama_summary.json
    python scripts/nvf_trace.py --parse /tmp/llama.json                    # analyse a trace only, no torch

nvFuser opens the trace on its first traced scope (so NVFUSER_TRACE is set here before dynamo_nvf or
nvfuser_direct is imported) and closes it only at process exit, so the file is read as it stands
(a cut-off file parses). Each scope writes two unbuffered lines (B and E, ~1-3 us each), so the report
gives the trace writes per call: subtract them in your head from the steady call times. Timestamps
have 1 us resolution. What the Python binding does around the C++ call (argument conversion, output
wrapping) is outside every traced scope: compare the steady call times with the per-region times
measured from Python (scripts/host_latency.py) to see it.

A top-level call is a FusionExecutorCache::runFusionWithInputs scope not nested in another. It is
"compiling" when any scope under it (or on a worker thread while it ran) matches COMPILE_MARKER, else
"steady". Scopes of other threads (nvFuser's parallel compile pool) that start while a call runs are
the call's, listed as "name [worker]" (their time overlaps the call's own, so never add it to it).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterable, Iterator, Optional

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]

#: The scope of one `fec.execute` (FusionExecutorCache::runFusionWithInputs in nvFuser's C++).
TOP_LEVEL = "FusionExecutorCache::runFusionWithInputs"
#: Scope names that only a compiling call runs: compilation, NVRTC, segmentation. Not "isCompiled"
#: (ExecutorDispatch::isCompiled runs on every call) and not "runSegmentsWithInputs" (every call too).
COMPILE_MARKER = re.compile(r"(?<!is)compile|nvrtc|segment fusion|segmentcandidatefinder", re.IGNORECASE)
WORKER = " [worker]"
#: What one trace write costs, as a range (us): the report turns writes per call into this much time.
WRITE_US = (1.0, 3.0)


@dataclass
class Scope:
    """One B/E pair of a thread; `closed` is False when the file ended (or an E line was lost) first."""

    name: str
    pid: int
    tid: int
    begin: float
    end: float
    closed: bool = True
    children: list["Scope"] = field(default_factory=list)

    @property
    def duration(self) -> float:
        return self.end - self.begin

    @property
    def self_time(self) -> float:
        """Time in this scope but in none of its children: where the uninstrumented code runs."""
        return self.duration - sum(c.duration for c in self.children)

    def walk(self) -> Iterator["Scope"]:
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass
class ParsedTrace:
    """The scope forests of every thread, and how damaged the file was."""

    roots: list[Scope]
    events: int
    bad_lines: int = 0
    unclosed: int = 0
    unmatched_ends: int = 0
    last_ts: float = 0.0


@dataclass
class Call:
    """One top-level `fec.execute`: its scope tree and the worker-thread scopes that ran during it."""

    top: Scope
    workers: list[Scope] = field(default_factory=list)

    def scopes(self) -> Iterator[tuple[Scope, bool]]:
        """Every scope of the call, with True for those on a worker thread."""
        for s in self.top.walk():
            yield s, False
        for w in self.workers:
            for s in w.walk():
                yield s, True

    @cached_property
    def compiling(self) -> bool:
        """Read once the workers are attached (find_calls)."""
        return any(COMPILE_MARKER.search(s.name) for s, _ in self.scopes())


# ----------------------------------------------------------------------------------------------- parsing


def read_events(text: str) -> tuple[list[dict], int]:
    """The trace's event dicts and the number of lines that were not events. A complete file is plain
    JSON; an open one (nvFuser writes the closing brackets at exit) is read one event per line."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        pass
    else:
        events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
        return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else [], 0
    events, bad = [], 0
    for line in text.splitlines():
        line = line.strip().rstrip(",").strip()
        if not line.startswith("{ \"") and not line.startswith("{\""):
            continue  # the "{", "traceEvents": [ prologue and the epilogue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            bad += 1  # the cut-off last line
            continue
        if isinstance(event, dict):
            events.append(event)
    return events, bad


def build_scopes(events: Iterable[dict]) -> ParsedTrace:
    """Pair B and E events per (pid, tid) with a stack. Scopes are RAII in nvFuser, so an E closes the
    innermost open scope of its name; scopes still open at the end close at the last timestamp."""
    stacks: dict[tuple[int, int], list[Scope]] = {}
    roots: list[Scope] = []
    trace = ParsedTrace(roots=roots, events=0)
    for e in events:
        ph, ts = e.get("ph"), float(e.get("ts", 0.0))
        trace.last_ts = max(trace.last_ts, ts)
        if ph not in ("B", "E"):
            continue
        trace.events += 1
        key = (int(e.get("pid", 0)), int(e.get("tid", 0)))
        stack = stacks.setdefault(key, [])
        name = str(e.get("name", ""))
        if ph == "B":
            scope = Scope(name, key[0], key[1], ts, ts)
            (stack[-1].children if stack else roots).append(scope)
            stack.append(scope)
            continue
        depth = next((i for i in range(len(stack) - 1, -1, -1) if stack[i].name == name), None)
        if depth is None:
            trace.unmatched_ends += 1
            continue
        for lost in stack[depth + 1:]:  # their E lines were lost: they end with the enclosing scope
            lost.end, lost.closed = ts, False
            trace.unclosed += 1
        stack[depth].end = ts
        del stack[depth:]
    for stack in stacks.values():
        for scope in stack:
            scope.end, scope.closed = trace.last_ts, False
            trace.unclosed += 1
    roots.sort(key=lambda s: s.begin)
    return trace


def parse_trace_text(text: str) -> ParsedTrace:
    events, bad = read_events(text)
    trace = build_scopes(events)
    trace.bad_lines = bad
    return trace


def parse_trace(path: Path | str) -> ParsedTrace:
    return parse_trace_text(Path(path).read_text(errors="replace"))


# ----------------------------------------------------------------------------------------------- calls


def _split(scope: Scope, calls: list[Call], free: list[Scope]) -> None:
    """Top-level calls under `scope`; subtrees holding no call go to `free`."""
    if scope.name == TOP_LEVEL:
        calls.append(Call(scope))
    elif any(s.name == TOP_LEVEL for s in scope.walk()):
        for child in scope.children:
            _split(child, calls, free)
    else:
        free.append(scope)


def find_calls(trace: ParsedTrace) -> tuple[list[Call], list[Scope]]:
    """The top-level calls, each with the other threads' scopes that began while it ran, and the
    scopes outside every call (FusionDefinition building, executor-cache creation, ...)."""
    calls: list[Call] = []
    free: list[Scope] = []
    for root in trace.roots:
        _split(root, calls, free)
    calls.sort(key=lambda c: c.top.begin)
    begins = [c.top.begin for c in calls]
    latest_end = list(_running_max(c.top.end for c in calls))  # no call before i ends later than this
    outside: list[Scope] = []
    for scope in free:
        owner = _owner(scope, calls, begins, latest_end)
        (outside if owner is None else owner.workers).append(scope)
    return calls, outside


def _running_max(values: Iterable[float]) -> Iterator[float]:
    top = float("-inf")
    for v in values:
        top = max(top, v)
        yield top


def _owner(scope: Scope, calls: list[Call], begins: list[float], latest_end: list[float]) -> Optional[Call]:
    """The latest call of the same process running when `scope` (of another thread: a scope of the
    call's own thread inside it would be nested in it) begins."""
    for i in range(bisect.bisect_right(begins, scope.begin) - 1, -1, -1):
        if latest_end[i] < scope.begin:
            return None  # every earlier call ended before the scope began
        c = calls[i]
        if c.top.pid == scope.pid and c.top.end >= scope.begin:
            return c
    return None


# ----------------------------------------------------------------------------------------------- numbers


@dataclass
class ScopeTotal:
    """One scope name summed over calls: inclusive time (outermost occurrences only, so a name nested
    in itself is not counted twice), own time, and occurrences."""

    name: str
    inclusive_us: float = 0.0
    self_us: float = 0.0
    count: int = 0


def scope_totals(calls: Iterable[Call]) -> dict[str, ScopeTotal]:
    """Per scope name (worker-thread scopes under their own "name [worker]"), over `calls`."""
    totals: dict[str, ScopeTotal] = {}
    for call in calls:
        _add_tree(call.top, False, totals, set())
        for w in call.workers:
            _add_tree(w, True, totals, set())
    return totals


def _add_tree(scope: Scope, worker: bool, totals: dict[str, ScopeTotal], open_names: set[str]) -> None:
    """Add `scope` and its subtree to `totals`; `open_names` are the enclosing scopes' keys."""
    key = scope.name + (WORKER if worker else "")
    total = totals.setdefault(key, ScopeTotal(key))
    total.count += 1
    total.self_us += scope.self_time
    nested = key in open_names
    if not nested:
        total.inclusive_us += scope.duration
        open_names.add(key)
    for child in scope.children:
        _add_tree(child, worker, totals, open_names)
    if not nested:
        open_names.discard(key)


def _quantile(values: list[float], q: float) -> float:
    """Inclusive (linear) quantile, exact for the small counts the tests use."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _scope_count(call: Call) -> int:
    return sum(1 for _ in call.scopes())


def summarize_compiling(calls: list[Call]) -> dict:
    """Totals over the compiling calls (ms): where a first call's seconds go (issue #12)."""
    totals = sorted(scope_totals(calls).values(), key=lambda t: -t.inclusive_us)
    return {
        "calls": len(calls),
        "total_ms": sum(c.top.duration for c in calls) / 1e3,
        "top_self_ms": sum(c.top.self_time for c in calls) / 1e3,
        "scopes": [{"name": t.name, "inclusive_ms": t.inclusive_us / 1e3, "self_ms": t.self_us / 1e3,
                    "count": t.count} for t in totals],
    }


def summarize_steady(calls: list[Call]) -> dict:
    """Per-call numbers over the steady calls (us): where one `fec.execute` goes (issue #10)."""
    if not calls:
        return {"calls": 0, "scopes": []}
    n = len(calls)
    durations = [c.top.duration for c in calls]
    totals = sorted(scope_totals(calls).values(), key=lambda t: -t.inclusive_us)
    scopes_per_call = statistics.median(_scope_count(c) for c in calls)
    return {
        "calls": n,
        "median_us": statistics.median(durations),
        "p90_us": _quantile(durations, 0.9),
        "mean_us": statistics.fmean(durations),
        "min_us": min(durations),
        "scopes_per_call": scopes_per_call,
        "trace_writes_per_call": 2 * scopes_per_call,
        "top_self_us_per_call": statistics.fmean(c.top.self_time for c in calls),
        "scopes": [{"name": t.name, "inclusive_us_per_call": t.inclusive_us / n, "self_us_per_call": t.self_us / n,
                    "count_per_call": t.count / n} for t in totals],
    }


def summarize_outside(scopes: list[Scope]) -> dict:
    """Traced work outside any call: nvFuser work that a `fec.execute` timing does not see."""
    totals: dict[str, ScopeTotal] = {}
    for s in scopes:
        _add_tree(s, False, totals, set())
    ordered = sorted(totals.values(), key=lambda t: -t.inclusive_us)
    return {
        "roots": len(scopes),
        "total_ms": sum(s.duration for s in scopes) / 1e3,
        "scopes": [{"name": t.name, "inclusive_ms": t.inclusive_us / 1e3, "self_ms": t.self_us / 1e3,
                    "count": t.count} for t in ordered],
    }


def summarize(trace: ParsedTrace, steady_after_ts: Optional[float] = None) -> dict:
    """Every number of the report, as a dict (what --json writes). `steady_after_ts`: the last
    timestamp of the first (compiling) step, when known, to count the calls of the later steps."""
    calls, outside = find_calls(trace)
    complete = [c for c in calls if c.top.closed]
    compiling = [c for c in complete if c.compiling]
    steady = [c for c in complete if not c.compiling]
    result = {
        "trace": {"events": trace.events, "bad_lines": trace.bad_lines, "unclosed_scopes": trace.unclosed,
                  "unmatched_ends": trace.unmatched_ends, "calls": len(calls),
                  "cut_off_calls": len(calls) - len(complete), "threads": len({(s.pid, s.tid) for s in trace.roots})},
        "compiling": summarize_compiling(compiling),
        "steady": summarize_steady(steady),
        "outside": summarize_outside(outside),
    }
    if steady_after_ts is not None:
        later = [c for c in complete if c.top.begin > steady_after_ts]
        result["later_steps"] = {"calls": len(later), "compiling_calls": sum(c.compiling for c in later),
                                 "call_us": sum(c.top.duration for c in later)}
    return result


# ----------------------------------------------------------------------------------------------- text


def format_report(summary: dict, top: Optional[int] = None) -> str:
    """The summary as plain-text tables, `top` scope names (by inclusive time) per table."""
    t, comp, steady, out = summary["trace"], summary["compiling"], summary["steady"], summary["outside"]
    lines = [f"trace: {t['events']} B/E events on {t['threads']} thread(s), {t['calls']} top-level calls "
             f"({t['cut_off_calls']} cut off), {t['bad_lines']} unreadable line(s), {t['unclosed_scopes']} unclosed "
             f"scope(s), {t['unmatched_ends']} unmatched E event(s)"]
    if "run" in summary:
        r, later = summary["run"], summary["later_steps"]
        steps = max(r["steady_steps"], 1)
        lines.append(f"run: {r['workload']} / {r['backend']} on {r['device']}: first step {r['first_step_ms']:.1f} ms; "
                     f"{r['steady_steps']} later steps at {r['step_us']:.1f} us each (traced, host wall, synchronized "
                     f"at the end), of which {later['call_us'] / steps:.1f} us inside {TOP_LEVEL} "
                     f"({later['calls'] / steps:.1f} calls per step, {later['compiling_calls']} compiling in all)")
    lines += ["", f"== compiling calls: {comp['calls']}, {comp['total_ms']:.1f} ms in all, "
                  f"{comp['top_self_ms']:.3f} ms in {TOP_LEVEL} itself (outside its child scopes)"]
    if comp["scopes"]:
        lines.append(tabulate([(s["inclusive_ms"], s["self_ms"], s["count"], s["name"]) for s in comp["scopes"][:top]],
                              headers=["incl ms", "self ms", "count", "scope (summed over compiling calls)"],
                              floatfmt=".3f"))
    lines.append("")
    if steady["calls"]:
        lo, hi = (steady["trace_writes_per_call"] * w for w in WRITE_US)
        lines += [f"== steady calls: {steady['calls']}, per call median {steady['median_us']:.1f} us, "
                  f"p90 {steady['p90_us']:.1f} us, mean {steady['mean_us']:.1f} us, min {steady['min_us']:.1f} us; "
                  f"{steady['top_self_us_per_call']:.1f} us/call in {TOP_LEVEL} itself",
                  f"   {steady['scopes_per_call']:g} scopes per call (median) = {steady['trace_writes_per_call']:g} "
                  f"trace writes, roughly {lo:.0f}-{hi:.0f} us of each call may be the trace's own writes",
                  tabulate([(s["inclusive_us_per_call"], s["self_us_per_call"], s["count_per_call"], s["name"])
                            for s in steady["scopes"][:top]],
                           headers=["incl us/call", "self us/call", "n/call", "scope (mean over steady calls)"],
                           floatfmt=".2f")]
    else:
        lines.append("== steady calls: none")
    lines += ["", f"== outside any call: {out['roots']} root scope(s), {out['total_ms']:.3f} ms"]
    if out["scopes"]:
        lines.append(tabulate([(s["inclusive_ms"], s["self_ms"], s["count"], s["name"]) for s in out["scopes"][:top]],
                              headers=["incl ms", "self ms", "count", "scope"], floatfmt=".3f"))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- run


def run_workload(workload: str, backend: str, steady: int, trace_path: Path) -> tuple[dict, float]:
    """Trace one workload: a first (compiling) step, then `steady` steps. Returns the run's facts and
    the trace's last timestamp after the first step (the later steps' calls begin after it)."""
    os.environ["NVFUSER_TRACE"] = str(trace_path)  # before anything imports nvfuser_direct
    sys.path.insert(0, str(ROOT))
    import torch

    from perf.backends import get_backend
    from perf.measure import backend_step, device_sync
    from perf.workloads import REGISTRY

    if workload not in REGISTRY:
        raise SystemExit(f"unknown workload {workload!r}; known: {', '.join(REGISTRY)}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = device_sync()
    step = backend_step(get_backend(backend), REGISTRY[workload].instantiate(device, tiny=device == "cpu"))
    start = time.perf_counter()
    step()
    sync()
    first_ms = (time.perf_counter() - start) * 1e3
    split_ts = parse_trace(trace_path).last_ts if trace_path.exists() else 0.0
    start = time.perf_counter()
    for _ in range(steady):
        step()
    sync()
    step_us = (time.perf_counter() - start) / max(steady, 1) * 1e6
    run = {"workload": workload, "backend": backend, "device": device, "first_step_ms": first_ms,
           "steady_steps": steady, "step_us": step_us, "trace": str(trace_path)}
    return run, split_ts


def _new_temp_file() -> str:
    fd, path = tempfile.mkstemp(prefix="nvf_trace_", suffix=".json")
    os.close(fd)
    return path


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", nargs="?", help="a perf workload name (perf/workloads.py REGISTRY)")
    parser.add_argument("--parse", metavar="FILE", help="only analyse this trace file (no torch run)")
    parser.add_argument("--backend", default="nvf_bookend")
    parser.add_argument("--steady", type=int, default=50, help="steps after the first (compiling) one")
    parser.add_argument("--trace", help="where nvFuser writes the trace (default: a new temporary file)")
    parser.add_argument("--top", type=int, default=25, help="scope names per table")
    parser.add_argument("--json", metavar="OUT", help="also write the numbers (all scope names) as JSON")
    args = parser.parse_args(argv)
    if (args.parse is None) == (args.workload is None):
        parser.error("give a WORKLOAD to run or --parse FILE, not both")
    run, split_ts = None, None
    if args.parse:
        trace_path = Path(args.parse)
    else:
        trace_path = Path(args.trace or _new_temp_file())
        run, split_ts = run_workload(args.workload, args.backend, args.steady, trace_path)
        print(f"trace file: {trace_path}")
    trace = parse_trace(trace_path) if trace_path.exists() else build_scopes([])
    summary = summarize(trace, split_ts)
    if run is not None:
        summary["run"] = run
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    print(format_report(summary, args.top))
    if not summary["trace"]["calls"]:
        print(f"no {TOP_LEVEL} call in the trace: nvFuser ran nothing (no CUDA or nvfuser_direct, every region "
              f"eager, or a CUDA-graph backend replaying)")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
