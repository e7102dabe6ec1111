"""scripts/nvf_trace.py reads nvFuser's Chrome trace (NVFUSER_TRACE) right: B/E pairing per thread,
compiling vs steady calls, worker-thread scopes, per-scope totals, and a file nvFuser has not closed
yet (it writes the closing brackets only at exit; the last line may be cut). The traces here are
written in nvFuser's own line format (instrumentation.cpp), with hand-computed expected numbers."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = "FusionExecutorCache::runFusionWithInputs"
PID, MAIN, POOL = 4242, 3735928559, 12345  # tids are hashed pthread ids: large unsigned ints


def load_script():
    spec = importlib.util.spec_from_file_location("nvf_trace", ROOT / "scripts" / "nvf_trace.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["nvf_trace"] = mod
    spec.loader.exec_module(mod)
    return mod


nvf_trace = load_script()


def line(name: str, ph: str, tid: int, ts: float, sep: str = ",") -> str:
    """One event exactly as nvFuser's Trace::logEvent prints it."""
    return f'{{ "name": "{name}", "ph": "{ph}", "pid": {PID}, "tid": {tid}, "ts": {ts:.0f} }}{sep}\n'


def scope(events: list, name: str, tid: int, begin: float, end: float, inner=()) -> None:
    events.append((begin, tid, "B", name))
    for child in inner:
        scope(events, *child)
    events.append((end, tid, "E", name))


def steady_call(events: list, t: float, d: float) -> None:
    """A cached call of d us: isCompiled and runSegmentsWithInputs must not mark it as compiling."""
    scope(events, TOP, MAIN, t, t + d, [
        ("ExecutorDispatch::isCompiled", MAIN, t + 1, t + 2),
        ("FusionKernelRuntime::runWithInputs", MAIN, t + 3, t + d - 2, [
            ("FusionKernelRuntime::runSegmentsWithInputs", MAIN, t + 4, t + d - 3, [
                ("KernelExecutor::run", MAIN, t + 5, t + d - 4, [
                    ("KernelExecutor::computeArgs", MAIN, t + 6, t + 10),
                    ("ExecutorRunFusion::cuLaunchKernelEx", MAIN, t + 11, t + 14)])])])])


def synthetic_events() -> list:
    """Outside scopes, two compiling calls (the first compiles on a pool thread), three steady calls
    of 40, 50 and 90 us, then a fourth call still running when the file was read."""
    ev: list = []
    scope(ev, "Fusion copy", MAIN, 1, 3)
    scope(ev, TOP, MAIN, 10, 1010, [
        ("FusionExecutorCache::getKernelRuntimeFor", MAIN, 12, 201, [
            ("FusionExecutorCache::getKernelRuntimeFor::compileNewKRT", MAIN, 13, 200, [
                ("Segment Fusion", MAIN, 14, 114)])]),
        ("FusionKernelRuntime::compileFusionParallel", MAIN, 205, 800),
        ("FusionKernelRuntime::runWithInputs", MAIN, 805, 905, [("KernelExecutor::run", MAIN, 806, 900)])])
    scope(ev, "FusionKernelRuntime::compileFusionParallel", POOL, 210, 760, [
        ("KernelExecutor::compile", POOL, 211, 750, [("executor_utils::NVRTC", POOL, 300, 700)])])
    scope(ev, TOP, MAIN, 2000, 2500, [
        ("FusionKernelRuntime::compileFusionParallel", MAIN, 2010, 2410, [
            ("KernelExecutor::compile", MAIN, 2020, 2400, [("executor_utils::NVRTC", MAIN, 2030, 2330)])]),
        ("FusionKernelRuntime::runWithInputs", MAIN, 2420, 2490, [("KernelExecutor::run", MAIN, 2425, 2480)])])
    scope(ev, "ThreadPool idle", POOL, 2600, 2610)  # a pool scope while no call runs: outside
    for t, d in ((3000, 40), (3100, 50), (3200, 90)):
        steady_call(ev, t, d)
    return sorted(ev, key=lambda e: e[0])  # file order is time order; stable within a thread


def trace_text(events: list, closed: bool) -> str:
    text = '{\n"traceEvents": [\n' + line("TRACE_START", "I", MAIN, 0)
    text += "".join(line(name, ph, tid, ts) for ts, tid, ph, name in events)
    if closed:
        text += line("TRACE_END", "I", MAIN, 5000, " ") + '],\n"displayTimeUnit": "ms"\n}\n'
    return text


@pytest.fixture
def open_trace(tmp_path) -> Path:
    """The file as read while the process runs: a fourth call and its KernelExecutor::run begun, and
    the last line cut mid-write."""
    ev = synthetic_events() + [(3400, MAIN, "B", TOP), (3401, MAIN, "B", "KernelExecutor::run")]
    path = tmp_path / "trace.json"
    path.write_text(trace_text(ev, closed=False) + '{ "name": "KernelExecutor::computeArgs", "ph": "B", "pi')
    return path


def by_name(rows: list[dict]) -> dict[str, dict]:
    return {r["name"]: r for r in rows}


def test_open_trace_counts(open_trace):
    summary = nvf_trace.summarize(nvf_trace.parse_trace(open_trace))
    assert summary["trace"] == {"events": 2 * (1 + 7 + 3 + 6 + 1 + 3 * 7) + 2, "bad_lines": 1,
                                "unclosed_scopes": 2, "unmatched_ends": 0, "calls": 6, "cut_off_calls": 1,
                                "threads": 2}
    assert summary["compiling"]["calls"] == 2
    assert summary["steady"]["calls"] == 3


def test_classification_per_call(open_trace):
    calls, outside = nvf_trace.find_calls(nvf_trace.parse_trace(open_trace))
    assert [(c.top.begin, c.compiling, c.top.closed) for c in calls] == [
        (10, True, True), (2000, True, True), (3000, False, True), (3100, False, True), (3200, False, True),
        (3400, False, False)]
    # The pool thread's compile belongs to the first call; its idle scope and "Fusion copy" to none.
    assert [(w.name, w.tid) for w in calls[0].workers] == [("FusionKernelRuntime::compileFusionParallel", POOL)]
    assert all(not c.workers for c in calls[1:])
    assert sorted(s.name for s in outside) == ["Fusion copy", "ThreadPool idle"]


def test_a_worker_compile_alone_marks_a_call_compiling(tmp_path):
    ev: list = []
    scope(ev, TOP, MAIN, 0, 100, [("FusionKernelRuntime::runWithInputs", MAIN, 60, 90)])
    scope(ev, "pool task", POOL, 5, 50, [("executor_utils::NVRTC", POOL, 10, 40)])
    path = tmp_path / "t.json"
    path.write_text(trace_text(sorted(ev, key=lambda e: e[0]), closed=True))
    (call,), outside = nvf_trace.find_calls(nvf_trace.parse_trace(path))
    assert call.compiling and outside == []


def test_compiling_totals(open_trace):
    comp = nvf_trace.summarize(nvf_trace.parse_trace(open_trace))["compiling"]
    assert comp["total_ms"] == pytest.approx(1.5)
    assert comp["top_self_ms"] == pytest.approx((1000 - 189 - 595 - 100 + 500 - 400 - 70) / 1e3)
    rows = by_name(comp["scopes"])
    expected = {  # name: (inclusive us, count)
        TOP: (1500, 2),
        "FusionKernelRuntime::compileFusionParallel": (595 + 400, 2),
        "FusionKernelRuntime::compileFusionParallel [worker]": (550, 1),
        "KernelExecutor::compile [worker]": (539, 1),
        "executor_utils::NVRTC [worker]": (400, 1),
        "KernelExecutor::compile": (380, 1),
        "executor_utils::NVRTC": (300, 1),
        "FusionExecutorCache::getKernelRuntimeFor": (189, 1),
        "FusionExecutorCache::getKernelRuntimeFor::compileNewKRT": (187, 1),
        "Segment Fusion": (100, 1),
        "FusionKernelRuntime::runWithInputs": (170, 2),
        "KernelExecutor::run": (94 + 55, 2),
    }
    assert {n: (round(r["inclusive_ms"] * 1e3, 6), r["count"]) for n, r in rows.items()} == expected
    assert [r["name"] for r in comp["scopes"]][:2] == [TOP, "FusionKernelRuntime::compileFusionParallel"]
    assert rows["KernelExecutor::compile"]["self_ms"] == pytest.approx(0.080)


def test_steady_numbers(open_trace):
    steady = nvf_trace.summarize(nvf_trace.parse_trace(open_trace))["steady"]
    assert steady["median_us"] == 50
    assert steady["p90_us"] == pytest.approx(82.0)  # linear between 50 and 90 at 0.9 * 2
    assert steady["mean_us"] == pytest.approx(60.0)
    assert steady["min_us"] == 40
    assert steady["scopes_per_call"] == 7 and steady["trace_writes_per_call"] == 14
    assert steady["top_self_us_per_call"] == pytest.approx(4.0)
    rows = by_name(steady["scopes"])
    assert {n: round(r["inclusive_us_per_call"], 6) for n, r in rows.items()} == {
        TOP: 60, "FusionKernelRuntime::runWithInputs": 55, "FusionKernelRuntime::runSegmentsWithInputs": 53,
        "KernelExecutor::run": 51, "KernelExecutor::computeArgs": 4, "ExecutorRunFusion::cuLaunchKernelEx": 3,
        "ExecutorDispatch::isCompiled": 1}
    assert all(r["count_per_call"] == 1 for r in rows.values())
    assert rows["KernelExecutor::run"]["self_us_per_call"] == pytest.approx(51 - 4 - 3)


def test_outside_calls(open_trace):
    out = nvf_trace.summarize(nvf_trace.parse_trace(open_trace))["outside"]
    assert out["roots"] == 2 and out["total_ms"] == pytest.approx(0.012)


def test_a_closed_file_reads_the_same(tmp_path, open_trace):
    path = tmp_path / "closed.json"
    path.write_text(trace_text(synthetic_events(), closed=True))
    json.loads(path.read_text())  # really a complete Chrome trace
    closed = nvf_trace.summarize(nvf_trace.parse_trace(path))
    cut = nvf_trace.summarize(nvf_trace.parse_trace(open_trace))
    assert closed["trace"]["bad_lines"] == 0 and closed["trace"]["unclosed_scopes"] == 0
    assert closed["trace"]["calls"] == 5 and closed["trace"]["cut_off_calls"] == 0
    assert closed["compiling"] == cut["compiling"] and closed["steady"] == cut["steady"]


def test_a_file_cut_mid_line_anywhere_parses(tmp_path):
    """Cut the closed file at every byte of the third steady call: it parses, and counts only the calls
    whose E line is whole."""
    text = trace_text(synthetic_events(), closed=True)
    first = text.index(line(TOP, "B", MAIN, 3200))
    last_e = text.index(line(TOP, "E", MAIN, 3290))
    for cut in range(first, last_e + len(line(TOP, "E", MAIN, 3290))):
        trace = nvf_trace.parse_trace_text(text[:cut])
        summary = nvf_trace.summarize(trace)
        complete_end = cut >= last_e + len(line(TOP, "E", MAIN, 3290)) - 2  # the "," and newline are optional
        assert summary["steady"]["calls"] == (3 if complete_end else 2), cut
        assert summary["compiling"]["calls"] == 2
        assert trace.bad_lines <= 1


def test_lost_end_line_closes_with_its_parent():
    ev = [(0, MAIN, "B", TOP), (1, MAIN, "B", "KernelExecutor::run"), (2, MAIN, "B", "KernelExecutor::computeArgs"),
          (9, MAIN, "E", "KernelExecutor::run"), (10, MAIN, "E", TOP), (11, MAIN, "E", "never begun")]
    text = "".join(line(name, ph, tid, ts) for ts, tid, ph, name in ev)
    trace = nvf_trace.parse_trace_text(text)
    assert (trace.unclosed, trace.unmatched_ends) == (1, 1)
    (top,) = trace.roots
    args = top.children[0].children[0]
    assert (args.name, args.end, args.closed) == ("KernelExecutor::computeArgs", 9, False)


def test_a_name_nested_in_itself_counts_its_time_once():
    ev: list = []
    scope(ev, TOP, MAIN, 0, 100, [("A", MAIN, 10, 60, [("A", MAIN, 20, 40)])])
    trace = nvf_trace.parse_trace_text("".join(line(n, ph, t, ts) for ts, t, ph, n in ev))
    totals = nvf_trace.scope_totals(nvf_trace.find_calls(trace)[0])
    assert (totals["A"].inclusive_us, totals["A"].self_us, totals["A"].count) == (50, 50, 2)


def test_markers():
    compile_names = ["KernelExecutor::compile", "FusionKernelRuntime::compileFusionParallel", "executor_utils::NVRTC",
                     "Segment Fusion", "SegmentCandidateFinder::findSegments", "CompiledKernel::compile"]
    steady_names = ["ExecutorDispatch::isCompiled", "FusionExecutorCache::isCompiled",
                    "FusionKernelRuntime::runSegmentsWithInputs", "KernelExecutor::run", TOP]
    assert all(nvf_trace.COMPILE_MARKER.search(n) for n in compile_names)
    assert not any(nvf_trace.COMPILE_MARKER.search(n) for n in steady_names)


def test_cli_parse_report_and_json(open_trace, tmp_path, capsys):
    out = tmp_path / "summary.json"
    assert nvf_trace.main(["--parse", str(open_trace), "--top", "3", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "== compiling calls: 2, 1.5 ms" in text
    assert "== steady calls: 3, per call median 50.0 us, p90 82.0 us" in text
    assert "7 scopes per call (median) = 14 trace writes, roughly 14-42 us" in text
    steady_table = text.split("== steady calls")[1].split("== outside")[0]
    assert "runSegmentsWithInputs" in steady_table and "KernelExecutor::run" not in steady_table  # --top 3
    saved = json.loads(out.read_text())
    assert saved["steady"]["calls"] == 3 and len(saved["steady"]["scopes"]) == 7  # JSON: every scope


def test_cli_says_when_nvfuser_ran_nothing(tmp_path, capsys):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert nvf_trace.main(["--parse", str(empty)]) == 2
    assert "no FusionExecutorCache::runFusionWithInputs call" in capsys.readouterr().out


def test_run_path_smoke_on_cpu(tmp_path):
    """The run path imports and drives a workload; on CPU regions run eagerly, so nvFuser traces
    nothing and the script says so (exit 2). On the GPU the same command prints the tables."""
    trace = tmp_path / "run.json"
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "nvf_trace.py"), "gelu_views", "--steady", "2",
                             "--trace", str(trace)], capture_output=True, text=True, timeout=240,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2, result.stderr[-2000:]
    assert "run: gelu_views / nvf_bookend on cpu" in result.stdout
    assert "no FusionExecutorCache::runFusionWithInputs call" in result.stdout
